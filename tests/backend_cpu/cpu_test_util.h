// Helpers shared by the CPU backend tests: random host tensors, a tolerance check against
// double-precision references, and a paged batch builder that lays sequences out in a KV
// cache through shuffled block tables (so a kernel that ignores the table fails).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "backend/backend.h"

namespace kestrel::test {

inline Tensor random_f32(Shape shape, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = Tensor::host(DType::kF32, shape);
  std::uniform_real_distribution<float> dist(lo, hi);
  float* p = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

inline Tensor i32_tensor(const std::vector<int32_t>& values, Shape shape) {
  Tensor t = Tensor::host(DType::kI32, shape);
  std::copy(values.begin(), values.end(), t.data_as<int32_t>());
  return t;
}

inline Tensor i32_tensor(const std::vector<int32_t>& values) {
  return i32_tensor(values, Shape{static_cast<int64_t>(values.size())});
}

// Every |got[i] - want[i]| <= tol * max(1, max |want|).
inline void expect_close(const float* got, const std::vector<double>& want, double tol,
                         const char* what) {
  double scale = 1.0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  double worst = 0.0;
  size_t worst_i = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(d <= worst)) {  // also catches NaN
      worst = std::isnan(d) ? INFINITY : d;
      worst_i = i;
    }
  }
  EXPECT_LE(worst, tol * scale) << what << ": element " << worst_i << " got " << got[worst_i]
                                << " want " << want[worst_i];
}

// One sequence of a step: num_cached tokens already in the cache, num_new computed now.
struct SeqSpec {
  int num_cached = 0;
  int num_new = 0;
};

// A step's AttentionMetadata plus where each sequence's tokens live in the cache.
struct PagedBatch {
  AttentionMetadata meta;
  int num_blocks = 0;
  // seq_slots[b][p]: cache slot of position p of sequence b.
  std::vector<std::vector<int64_t>> seq_slots;
  // first_row[b]: flat row of sequence b's first new token.
  std::vector<int> first_row;
};

// Builds metadata for `seqs` with `padding` extra rows at the end (slot -1, position 0).
// Blocks are taken from a shuffled pool of num_blocks >= needed blocks, so block ids are
// neither contiguous nor ordered.
inline PagedBatch make_paged_batch(const std::vector<SeqSpec>& seqs, int block_size,
                                   std::mt19937& rng, int padding = 0, int spare_blocks = 3) {
  PagedBatch pb;
  const int B = static_cast<int>(seqs.size());
  int needed = 0, max_blocks = 1, T = 0, max_q = 0, max_len = 0;
  for (const SeqSpec& s : seqs) {
    const int len = s.num_cached + s.num_new;
    const int nb = (len + block_size - 1) / block_size;
    needed += nb;
    max_blocks = std::max(max_blocks, nb);
    T += s.num_new;
    max_q = std::max(max_q, s.num_new);
    max_len = std::max(max_len, len);
  }
  pb.num_blocks = needed + spare_blocks;
  std::vector<int32_t> pool(pb.num_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);

  std::vector<int32_t> positions, slots, qsl{0}, lens, tables(B * max_blocks, 0);
  size_t next = 0;
  for (int b = 0; b < B; ++b) {
    const int len = seqs[b].num_cached + seqs[b].num_new;
    const int nb = (len + block_size - 1) / block_size;
    for (int i = 0; i < nb; ++i) tables[b * max_blocks + i] = pool[next++];
    std::vector<int64_t> ss(len);
    for (int p = 0; p < len; ++p) {
      ss[p] = static_cast<int64_t>(tables[b * max_blocks + p / block_size]) * block_size +
              p % block_size;
    }
    pb.first_row.push_back(static_cast<int>(positions.size()));
    for (int p = seqs[b].num_cached; p < len; ++p) {
      positions.push_back(p);
      slots.push_back(static_cast<int32_t>(ss[p]));
    }
    pb.seq_slots.push_back(std::move(ss));
    qsl.push_back(static_cast<int32_t>(positions.size()));
    lens.push_back(len);
  }
  for (int i = 0; i < padding; ++i) {
    positions.push_back(0);
    slots.push_back(-1);
  }
  AttentionMetadata& m = pb.meta;
  m.num_tokens = T + padding;
  m.num_seqs = B;
  m.max_query_len = max_q;
  m.max_seq_len = max_len;
  m.block_size = block_size;
  m.positions = i32_tensor(positions);
  m.slot_mapping = i32_tensor(slots);
  m.query_start_loc = i32_tensor(qsl);
  m.seq_lens = i32_tensor(lens);
  m.block_tables = i32_tensor(tables, Shape{B, max_blocks});
  return pb;
}

}  // namespace kestrel::test
