// Test helper: drives CausalLM the way the engine will, with a paged KV cache, sequences
// that grow step by step, and blocks handed out from a shuffled free list (so block ids are
// not contiguous and a kernel that ignores the block table fails).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "model/causal_lm.h"

namespace kestrel::test {

class PagedRunner {
 public:
  PagedRunner(CausalLM& model, Backend& backend, int num_blocks, int block_size, uint32_t seed)
      : model_(model), backend_(backend), block_size_(block_size) {
    kv_ = backend.allocate_kv_cache(model.kv_cache_spec(num_blocks, block_size));
    free_.resize(num_blocks);
    std::iota(free_.begin(), free_.end(), 0);
    std::shuffle(free_.begin(), free_.end(), std::mt19937(seed));
  }

  int add_sequence() {
    seqs_.emplace_back();
    return static_cast<int>(seqs_.size()) - 1;
  }

  // One step: seq ids with their new tokens. Returns logits rows: every new token's row when
  // all_rows, else the last row of each sequence, in work order.
  std::vector<std::vector<float>> step(const std::vector<std::pair<int, std::vector<int>>>& work,
                                       bool all_rows) {
    std::vector<int32_t> ids, positions, slots, qsl{0}, lens, rows;
    int max_q = 0, max_len = 0, max_blocks = 1;
    for (const auto& [id, tokens] : work) {
      Seq& s = seqs_[id];
      const int len = s.num_cached + static_cast<int>(tokens.size());
      while (static_cast<int>(s.blocks.size()) * block_size_ < len) {
        KS_ASSERT(!free_.empty(), "test cache too small");
        s.blocks.push_back(free_.back());
        free_.pop_back();
      }
      for (size_t i = 0; i < tokens.size(); ++i) {
        const int p = s.num_cached + static_cast<int>(i);
        if (all_rows || i + 1 == tokens.size()) rows.push_back(static_cast<int32_t>(ids.size()));
        ids.push_back(tokens[i]);
        positions.push_back(p);
        slots.push_back(s.blocks[p / block_size_] * block_size_ + p % block_size_);
      }
      qsl.push_back(static_cast<int32_t>(ids.size()));
      lens.push_back(len);
      max_q = std::max(max_q, static_cast<int>(tokens.size()));
      max_len = std::max(max_len, len);
      max_blocks = std::max(max_blocks, static_cast<int>(s.blocks.size()));
    }
    const int B = static_cast<int>(work.size());
    std::vector<int32_t> tables(static_cast<size_t>(B) * max_blocks, 0);
    for (int b = 0; b < B; ++b) {
      const Seq& s = seqs_[work[b].first];
      std::copy(s.blocks.begin(), s.blocks.end(), tables.begin() + b * max_blocks);
    }
    AttentionMetadata meta;
    meta.num_tokens = static_cast<int>(ids.size());
    meta.num_seqs = B;
    meta.max_query_len = max_q;
    meta.max_seq_len = max_len;
    meta.block_size = block_size_;
    meta.positions = upload(positions, {static_cast<int64_t>(positions.size())});
    meta.slot_mapping = upload(slots, {static_cast<int64_t>(slots.size())});
    meta.query_start_loc = upload(qsl, {B + 1});
    meta.seq_lens = upload(lens, {B});
    meta.block_tables = upload(tables, {B, max_blocks});
    Tensor logits =
        backend_.to_host(model_.forward(upload(ids, {static_cast<int64_t>(ids.size())}), meta, kv_,
                                        upload(rows, {static_cast<int64_t>(rows.size())})));
    for (const auto& [id, tokens] : work) seqs_[id].num_cached += static_cast<int>(tokens.size());

    const int64_t V = logits.dim(1);
    std::vector<std::vector<float>> out;
    for (int64_t r = 0; r < logits.dim(0); ++r) {
      const float* p = logits.data_as<float>() + r * V;
      out.emplace_back(p, p + V);
    }
    return out;
  }

 private:
  struct Seq {
    int num_cached = 0;
    std::vector<int32_t> blocks;
  };

  Tensor upload(const std::vector<int32_t>& v, Shape shape) {
    Tensor h = Tensor::host(DType::kI32, shape);
    std::copy(v.begin(), v.end(), h.data_as<int32_t>());
    return backend_.upload(h, DType::kI32);
  }

  CausalLM& model_;
  Backend& backend_;
  int block_size_;
  std::vector<LayerKvCache> kv_;
  std::vector<int32_t> free_;
  std::vector<Seq> seqs_;
};

inline int argmax(const std::vector<float>& row) {
  return static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin());
}

}  // namespace kestrel::test
