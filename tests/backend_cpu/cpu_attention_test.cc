// Paged causal attention against a reference that keeps each sequence's K/V contiguous and
// computes softmax(q k^T * scale) v in double. The cache is filled with NaN except for the
// slots the sequences own, so reading any other slot fails the comparison.
#include <cmath>
#include <limits>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "cpu_test_util.h"

namespace kestrel {
namespace {

using test::expect_close;
using test::random_f32;
using test::SeqSpec;

struct Case {
  int Hq, Hkv, D, block_size;
  std::vector<SeqSpec> seqs;
  int padding = 0;
};

void run_case(const Case& c, std::mt19937& rng, int threads = 2) {
  SCOPED_TRACE(testing::Message() << "Hq " << c.Hq << " Hkv " << c.Hkv << " D " << c.D << " block "
                                  << c.block_size << " seqs " << c.seqs.size());
  CpuBackend be(threads);
  test::PagedBatch pb = test::make_paged_batch(c.seqs, c.block_size, rng, c.padding);
  const int T = pb.meta.num_tokens, D = c.D, Hq = c.Hq, Hkv = c.Hkv, G = Hq / Hkv;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  LayerKvCache kv{be.empty(DType::kF32, {pb.num_blocks, c.block_size, Hkv, D}),
                  be.empty(DType::kF32, {pb.num_blocks, c.block_size, Hkv, D})};
  std::fill(kv.k.data_as<float>(), kv.k.data_as<float>() + kv.k.numel(), nan);
  std::fill(kv.v.data_as<float>(), kv.v.data_as<float>() + kv.v.numel(), nan);
  // Contiguous per-sequence K/V [len, Hkv, D], scattered into the cache.
  std::vector<Tensor> ks, vs;
  for (size_t b = 0; b < c.seqs.size(); ++b) {
    const int len = c.seqs[b].num_cached + c.seqs[b].num_new;
    ks.push_back(random_f32({std::max(len, 1), Hkv, D}, rng, -2.0f, 2.0f));
    vs.push_back(random_f32({std::max(len, 1), Hkv, D}, rng));
    for (int p = 0; p < len; ++p) {
      const int64_t dst = pb.seq_slots[b][p] * Hkv * D;
      std::copy_n(ks[b].data_as<float>() + int64_t(p) * Hkv * D, Hkv * D,
                  kv.k.data_as<float>() + dst);
      std::copy_n(vs[b].data_as<float>() + int64_t(p) * Hkv * D, Hkv * D,
                  kv.v.data_as<float>() + dst);
    }
  }
  Tensor q = random_f32({T, Hq * D}, rng, -2.0f, 2.0f);
  Tensor out = be.empty(DType::kF32, {T, Hq * D});
  std::fill(out.data_as<float>(), out.data_as<float>() + out.numel(), 123.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  be.attention(q, kv, {Hq, Hkv, D}, pb.meta, scale, out);

  std::vector<double> want(static_cast<size_t>(T) * Hq * D, 0.0);  // padding rows stay 0
  for (size_t b = 0; b < c.seqs.size(); ++b) {
    for (int i = 0; i < c.seqs[b].num_new; ++i) {
      const int t = pb.first_row[b] + i;
      const int p = c.seqs[b].num_cached + i;
      for (int h = 0; h < Hq; ++h) {
        const int g = h / G;
        const float* qh = q.data_as<float>() + (int64_t(t) * Hq + h) * D;
        std::vector<double> s(p + 1);
        double m = -INFINITY;
        for (int j = 0; j <= p; ++j) {
          const float* k = ks[b].data_as<float>() + (int64_t(j) * Hkv + g) * D;
          double dot = 0.0;
          for (int d = 0; d < D; ++d) dot += double(qh[d]) * k[d];
          s[j] = dot * scale;
          m = std::max(m, s[j]);
        }
        double sum = 0.0;
        for (double& x : s) sum += (x = std::exp(x - m));
        for (int j = 0; j <= p; ++j) {
          const float* v = vs[b].data_as<float>() + (int64_t(j) * Hkv + g) * D;
          for (int d = 0; d < D; ++d) want[(int64_t(t) * Hq + h) * D + d] += s[j] / sum * v[d];
        }
      }
    }
  }
  expect_close(out.data_as<float>(), want, 2e-6, "attention");
}

TEST(CpuAttention, PrefillDecodeAndMixedBatchesOverShapes) {
  std::mt19937 rng(41);
  // Prefill from empty, a cached prefix plus a chunk, one-token decodes, a block-aligned
  // length and one longer than a block.
  const std::vector<SeqSpec> seqs{{0, 7}, {20, 1}, {5, 33}, {16, 16}, {0, 1}, {40, 1}};
  for (int D : {32, 64, 128}) {
    for (auto [Hq, Hkv] : {std::pair{2, 2}, {4, 2}, {8, 2}}) {
      for (int bs : {1, 16}) run_case({Hq, Hkv, D, bs, seqs, /*padding=*/1}, rng);
    }
  }
}

TEST(CpuAttention, ManyDecodeRows) {
  std::mt19937 rng(42);
  std::vector<SeqSpec> seqs;
  for (int b = 0; b < 64; ++b) seqs.push_back({static_cast<int>(rng() % 70), 1});
  run_case({8, 2, 64, 16, seqs}, rng);
  run_case({4, 4, 32, 1, seqs}, rng, /*threads=*/1);
}

TEST(CpuAttention, SingleTokenPrompt) {
  std::mt19937 rng(43);
  run_case({4, 1, 64, 16, {{0, 1}}}, rng);
}

TEST(CpuAttention, HugeScoresStayFinite) {
  // Scores near 1e4 overflow exp() without the max subtraction.
  std::mt19937 rng(44);
  CpuBackend be(2);
  const int D = 32;
  test::PagedBatch pb = test::make_paged_batch({{0, 3}}, 16, rng);
  LayerKvCache kv{be.empty(DType::kF32, {pb.num_blocks, 16, 1, D}),
                  be.empty(DType::kF32, {pb.num_blocks, 16, 1, D})};
  Tensor q = be.empty(DType::kF32, {3, D});
  for (int t = 0; t < 3; ++t) {
    for (int d = 0; d < D; ++d) q.data_as<float>()[t * D + d] = 100.0f;
  }
  for (int p = 0; p < 3; ++p) {
    const int64_t base = pb.seq_slots[0][p] * D;
    for (int d = 0; d < D; ++d) {
      kv.k.data_as<float>()[base + d] = 3.0f + p;  // later keys score higher
      kv.v.data_as<float>()[base + d] = static_cast<float>(p + 1);
    }
  }
  Tensor out = be.empty(DType::kF32, {3, D});
  be.attention(q, kv, {1, 1, D}, pb.meta, 1.0f, out);
  // Differences of 3200 between scores: each row attends to its last key only.
  for (int t = 0; t < 3; ++t) EXPECT_FLOAT_EQ(out.data_as<float>()[t * D], t + 1.0f);
}

TEST(CpuAttention, RejectsBadMetadata) {
  std::mt19937 rng(45);
  CpuBackend be(1);
  const int D = 32, bs = 4;
  test::PagedBatch pb = test::make_paged_batch({{3, 2}, {0, 1}}, bs, rng);
  LayerKvCache kv{random_f32({pb.num_blocks, bs, 2, D}, rng),
                  random_f32({pb.num_blocks, bs, 2, D}, rng)};
  Tensor q = random_f32({3, 4 * D}, rng);
  Tensor out = be.empty(DType::kF32, {3, 4 * D});
  const AttentionShape shape{4, 2, D};
  EXPECT_NO_THROW(be.attention(q, kv, shape, pb.meta, 0.1f, out));
  int32_t* table = pb.meta.block_tables.data_as<int32_t>();
  const int32_t saved = table[0];
  table[0] = pb.num_blocks;  // block past the cache
  EXPECT_THROW(be.attention(q, kv, shape, pb.meta, 0.1f, out), Error);
  table[0] = saved;
  pb.meta.seq_lens.data_as<int32_t>()[1] = 0;  // fewer keys than new tokens
  EXPECT_THROW(be.attention(q, kv, shape, pb.meta, 0.1f, out), Error);
  pb.meta.seq_lens.data_as<int32_t>()[1] = 1;
  pb.meta.block_size = 8;  // disagrees with the cache
  EXPECT_THROW(be.attention(q, kv, shape, pb.meta, 0.1f, out), Error);
  pb.meta.block_size = bs;
  EXPECT_THROW(be.attention(q, kv, {3, 2, D}, pb.meta, 0.1f, out), Error);  // 3 % 2 != 0
  pb.meta.query_start_loc.data_as<int32_t>()[2] = 4;                        // past T
  EXPECT_THROW(be.attention(q, kv, shape, pb.meta, 0.1f, out), Error);
}

}  // namespace
}  // namespace kestrel
