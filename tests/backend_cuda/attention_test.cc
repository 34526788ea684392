// Paged attention over flat mixed batches against a double-precision reference: decodes,
// prefill chunks after cached prefixes, long rows, GQA groups 1 to 16, head dims 64 and 128,
// block sizes 16 and 1, blocks scattered through the cache. Cache slots that no sequence
// owns hold NaN, so a read past a sequence's keys shows up in the output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "cuda_test_util.h"

namespace kestrel {
namespace {

using namespace cuda_test;

struct SeqSpec {
  int cached;      // keys already in the cache
  int new_tokens;  // query tokens this step (their keys are in the cache too)
};

struct Config {
  int hq, hkv, d, block_size;
};

void run_case(const Config& c, const std::vector<SeqSpec>& seqs, CudaKvLayout layout,
              std::mt19937& rng) {
  Backend& be = gpu(layout);
  const int b_count = static_cast<int>(seqs.size());
  const int group = c.hq / c.hkv;
  std::vector<int32_t> qsl{0}, seq_lens;
  int max_blocks = 1, used_blocks = 0;
  for (const SeqSpec& s : seqs) {
    qsl.push_back(qsl.back() + s.new_tokens);
    seq_lens.push_back(s.cached + s.new_tokens);
    const int nb = (seq_lens.back() + c.block_size - 1) / c.block_size;
    used_blocks += nb;
    max_blocks = std::max(max_blocks, nb + 1);  // + 1: trailing unused entries stay 0
  }
  const int t_count = qsl.back();
  const int num_blocks = used_blocks + 3;

  // Scatter the sequences' blocks over the cache.
  std::vector<int32_t> perm(num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> tables(size_t(b_count) * max_blocks, 0);
  int next = 0;
  for (int b = 0; b < b_count; ++b) {
    const int nb = (seq_lens[b] + c.block_size - 1) / c.block_size;
    for (int i = 0; i < nb; ++i) tables[size_t(b) * max_blocks + i] = perm[next++];
  }
  auto slot_of = [&](int b, int pos) {
    return tables[size_t(b) * max_blocks + pos / c.block_size] * c.block_size + pos % c.block_size;
  };

  // K/V: NaN everywhere, random bf16 at each sequence's key slots.
  const Shape cache_shape = layout == CudaKvLayout::kHeadMajor
                                ? Shape{num_blocks, c.hkv, c.block_size, c.d}
                                : Shape{num_blocks, c.block_size, c.hkv, c.d};
  Tensor k_host = Tensor::host(DType::kBF16, cache_shape);
  Tensor v_host = Tensor::host(DType::kBF16, cache_shape);
  std::fill_n(k_host.data_as<uint16_t>(), k_host.numel(), uint16_t{0x7fc0});
  std::fill_n(v_host.data_as<uint16_t>(), v_host.numel(), uint16_t{0x7fc0});
  std::vector<std::vector<double>> keys(b_count), vals(b_count);  // [pos, hkv, d]
  for (int b = 0; b < b_count; ++b) {
    Bf16Data kd = random_bf16(Shape{seq_lens[b], c.hkv, c.d}, rng);
    Bf16Data vd = random_bf16(Shape{seq_lens[b], c.hkv, c.d}, rng);
    for (int pos = 0; pos < seq_lens[b]; ++pos) {
      const int32_t block = tables[size_t(b) * max_blocks + pos / c.block_size];
      for (int h = 0; h < c.hkv; ++h) {
        const size_t src = (size_t(pos) * c.hkv + h) * c.d;
        const size_t dst = kv_row(layout, block, pos % c.block_size, h, c.hkv, c.block_size, c.d);
        std::copy_n(kd.host.data_as<uint16_t>() + src, c.d, k_host.data_as<uint16_t>() + dst);
        std::copy_n(vd.host.data_as<uint16_t>() + src, c.d, v_host.data_as<uint16_t>() + dst);
      }
    }
    keys[b] = std::move(kd.values);
    vals[b] = std::move(vd.values);
  }

  Bf16Data q = random_bf16(Shape{t_count, int64_t(c.hq) * c.d}, rng, -3.0f, 3.0f);
  std::vector<int32_t> positions, slots;
  for (int b = 0; b < b_count; ++b) {
    for (int i = 0; i < seqs[b].new_tokens; ++i) {
      positions.push_back(seqs[b].cached + i);
      slots.push_back(slot_of(b, seqs[b].cached + i));
    }
  }
  AttentionMetadata meta;
  meta.num_tokens = t_count;
  meta.num_seqs = b_count;
  meta.block_size = c.block_size;
  for (const SeqSpec& s : seqs) {
    meta.max_query_len = std::max(meta.max_query_len, s.new_tokens);
    meta.max_seq_len = std::max(meta.max_seq_len, s.cached + s.new_tokens);
  }
  meta.positions = be.upload(i32_host(positions), DType::kI32);
  meta.slot_mapping = be.upload(i32_host(slots), DType::kI32);
  meta.query_start_loc = be.upload(i32_host(qsl), DType::kI32);
  meta.seq_lens = be.upload(i32_host(seq_lens), DType::kI32);
  meta.block_tables = be.upload(i32_host(tables, Shape{b_count, max_blocks}), DType::kI32);
  LayerKvCache kv{be.upload(k_host, DType::kBF16), be.upload(v_host, DType::kBF16)};
  Tensor out = poisoned(DType::kBF16, Shape{t_count, int64_t(c.hq) * c.d}, be);
  const double scale = 1.0 / std::sqrt(double(c.d));
  be.attention(be.upload(q.host, DType::kBF16), kv, AttentionShape{c.hq, c.hkv, c.d}, meta,
                  static_cast<float>(scale), out);

  std::vector<double> ref(size_t(t_count) * c.hq * c.d);
  std::vector<double> p;
  for (int b = 0; b < b_count; ++b) {
    for (int i = 0; i < seqs[b].new_tokens; ++i) {
      const int t = qsl[b] + i;
      const int pos = seqs[b].cached + i;
      for (int h = 0; h < c.hq; ++h) {
        const int g = h / group;
        const double* qv = &q.values[(size_t(t) * c.hq + h) * c.d];
        p.assign(pos + 1, 0.0);
        double mx = -1e300;
        for (int j = 0; j <= pos; ++j) {
          const double* kv_row = &keys[b][(size_t(j) * c.hkv + g) * c.d];
          double s = 0;
          for (int e = 0; e < c.d; ++e) s += qv[e] * kv_row[e];
          p[j] = s * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (double& x : p) sum += (x = std::exp(x - mx));
        double* o = &ref[(size_t(t) * c.hq + h) * c.d];
        for (int j = 0; j <= pos; ++j) {
          const double* v_row = &vals[b][(size_t(j) * c.hkv + g) * c.d];
          for (int e = 0; e < c.d; ++e) o[e] += p[j] / sum * v_row[e];
        }
      }
    }
  }
  expect_close(fetch(out, be), ref, "attention");
}

const CudaKvLayout kLayouts[] = {CudaKvLayout::kTokenMajor, CudaKvLayout::kHeadMajor};

const Config kConfigs[] = {
    {4, 4, 64, 16},     // MHA
    {16, 8, 128, 16},   // Qwen3-0.6B (GQA 2)
    {8, 2, 128, 1},     // GQA 4, one-token blocks
    {12, 4, 128, 16},   // GQA 3: query tiles of 5 tokens
    {16, 1, 64, 16},    // GQA 16 (the largest group)
    {6, 3, 64, 1},
};

TEST(CudaAttention, DecodeBatch) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(51);
  std::uniform_int_distribution<int> ctx(0, 300);
  for (const Config& c : kConfigs) {
    std::vector<SeqSpec> seqs;
    for (int i = 0; i < 7; ++i) seqs.push_back({ctx(rng), 1});
    seqs.push_back({0, 1});  // a first token: one key
    for (CudaKvLayout layout : kLayouts) {
      SCOPED_TRACE(testing::Message() << layout_name(layout) << " Hq " << c.hq << " Hkv " << c.hkv
                                      << " D " << c.d << " block " << c.block_size);
      run_case(c, seqs, layout, rng);
    }
  }
}

TEST(CudaAttention, MixedPrefillAndDecode) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(52);
  const std::vector<SeqSpec> seqs{{0, 33}, {100, 1}, {17, 7}, {0, 1}, {250, 16}, {31, 2}, {5, 200}};
  for (const Config& c : kConfigs) {
    for (CudaKvLayout layout : kLayouts) {
      SCOPED_TRACE(testing::Message() << layout_name(layout) << " Hq " << c.hq << " Hkv " << c.hkv
                                      << " D " << c.d << " block " << c.block_size);
      run_case(c, seqs, layout, rng);
    }
  }
}

TEST(CudaAttention, LongRows) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(53);
  const std::vector<SeqSpec> seqs{{0, 1000}, {990, 10}, {1023, 1}};
  for (const Config& c : {Config{8, 2, 128, 16}, Config{4, 4, 64, 1}}) {
    for (CudaKvLayout layout : kLayouts) {
      SCOPED_TRACE(testing::Message() << layout_name(layout) << " Hq " << c.hq << " Hkv " << c.hkv
                                      << " D " << c.d << " block " << c.block_size);
      run_case(c, seqs, layout, rng);
    }
  }
}

TEST(CudaAttention, LongContextDecodeSplitsKeys) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(55);
  // Too few sequences to fill the GPU: the keys are split over CTAs and merged.
  const std::vector<SeqSpec> seqs{{3000, 1}, {1999, 1}, {40, 1}};
  for (const Config& c : {Config{16, 8, 128, 16}, Config{16, 1, 64, 1}}) {
    for (CudaKvLayout layout : kLayouts) {
      SCOPED_TRACE(testing::Message() << layout_name(layout) << " Hq " << c.hq << " Hkv " << c.hkv
                                      << " D " << c.d << " block " << c.block_size);
      run_case(c, seqs, layout, rng);
    }
  }
}

TEST(CudaAttention, ManySequencesInOneLaunch) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(54);
  // 70 sequences: the tile lookup scans query_start_loc in several 32-wide steps.
  std::vector<SeqSpec> seqs;
  std::uniform_int_distribution<int> ctx(0, 60), len(1, 9);
  for (int i = 0; i < 70; ++i) seqs.push_back({ctx(rng), i % 3 == 0 ? len(rng) : 1});
  for (CudaKvLayout layout : kLayouts) {
    SCOPED_TRACE(layout_name(layout));
    run_case(Config{16, 8, 128, 16}, seqs, layout, rng);
  }
}

}  // namespace
}  // namespace kestrel
