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
  // An F8_E4M3 cache: K/V are drawn as random codes with a power-of-two scale per (K or V,
  // head), and the reference sees their values as the format defines them.
  bool fp8 = false;
};

// The value of e4m3 code c (sign, exponent bias 7, 3 mantissa bits, subnormals m 2^-9),
// from the format's definition; c is never the NaN pattern here.
double e4m3_value(uint8_t c) {
  const int e = (c >> 3) & 0xf, m = c & 7;
  const double mag = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return (c & 0x80) ? -mag : mag;
}

// Random codes for every (slot, head) row, any but NaN; ks/vs get the scaled values.
void fill_fp8(LayerKvCache& kv, std::vector<Tensor>& ks, std::vector<Tensor>& vs,
              const test::PagedBatch& pb, int Hkv, int D, std::mt19937& rng) {
  float* scale = kv.scale.data_as<float>();
  // Every code can be drawn; K's scales keep the keys within +-7 (448 x 2^-6), so that the
  // scores stay in a range where the softmax is not one-hot.
  for (int i = 0; i < Hkv; ++i) scale[i] = std::ldexp(1.0f, static_cast<int>(rng() % 4) - 9);
  for (int i = Hkv; i < 2 * Hkv; ++i) scale[i] = std::ldexp(1.0f, static_cast<int>(rng() % 9) - 6);
  std::uniform_int_distribution<int> code(0, 253);  // skip 0x7f, 0xff
  auto draw = [&] {
    const int c = code(rng);
    return static_cast<uint8_t>(c < 0x7f ? c : c + 1);
  };
  std::fill_n(kv.k.data_as<uint8_t>(), kv.k.numel(), 0x7f);  // other slots read as NaN
  std::fill_n(kv.v.data_as<uint8_t>(), kv.v.numel(), 0x7f);
  for (size_t b = 0; b < ks.size(); ++b) {
    for (int64_t p = 0; p < static_cast<int64_t>(pb.seq_slots[b].size()); ++p) {
      for (int g = 0; g < Hkv; ++g) {
        for (int d = 0; d < D; ++d) {
          const int64_t src = (p * Hkv + g) * D + d, dst = (pb.seq_slots[b][p] * Hkv + g) * D + d;
          const uint8_t kc = draw(), vc = draw();
          kv.k.data_as<uint8_t>()[dst] = kc;
          kv.v.data_as<uint8_t>()[dst] = vc;
          ks[b].data_as<float>()[src] = static_cast<float>(e4m3_value(kc) * scale[g]);
          vs[b].data_as<float>()[src] = static_cast<float>(e4m3_value(vc) * scale[Hkv + g]);
        }
      }
    }
  }
}

void run_case(const Case& c, std::mt19937& rng, int threads = 2) {
  SCOPED_TRACE(testing::Message() << "Hq " << c.Hq << " Hkv " << c.Hkv << " D " << c.D << " block "
                                  << c.block_size << " seqs " << c.seqs.size());
  CpuBackend be(threads);
  test::PagedBatch pb = test::make_paged_batch(c.seqs, c.block_size, rng, c.padding);
  const int T = pb.meta.num_tokens, D = c.D, Hq = c.Hq, Hkv = c.Hkv, G = Hq / Hkv;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  LayerKvCache kv = be.allocate_kv_cache(
      {1, pb.num_blocks, c.block_size, Hkv, D, c.fp8 ? DType::kF8E4M3 : DType::kF32})[0];
  if (!c.fp8) {
    std::fill(kv.k.data_as<float>(), kv.k.data_as<float>() + kv.k.numel(), nan);
    std::fill(kv.v.data_as<float>(), kv.v.data_as<float>() + kv.v.numel(), nan);
  }
  // Contiguous per-sequence K/V [len, Hkv, D], scattered into the cache.
  std::vector<Tensor> ks, vs;
  for (size_t b = 0; b < c.seqs.size(); ++b) {
    const int len = c.seqs[b].num_cached + c.seqs[b].num_new;
    ks.push_back(random_f32({std::max(len, 1), Hkv, D}, rng, -2.0f, 2.0f));
    vs.push_back(random_f32({std::max(len, 1), Hkv, D}, rng));
    for (int p = 0; p < len && !c.fp8; ++p) {
      const int64_t dst = pb.seq_slots[b][p] * Hkv * D;
      std::copy_n(ks[b].data_as<float>() + int64_t(p) * Hkv * D, Hkv * D,
                  kv.k.data_as<float>() + dst);
      std::copy_n(vs[b].data_as<float>() + int64_t(p) * Hkv * D, Hkv * D,
                  kv.v.data_as<float>() + dst);
    }
  }
  if (c.fp8) fill_fp8(kv, ks, vs, pb, Hkv, D, rng);
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

TEST(CpuAttention, Fp8CacheAgainstDequantizedValues) {
  std::mt19937 rng(46);
  const std::vector<SeqSpec> seqs{{0, 7}, {20, 1}, {5, 33}, {16, 16}, {0, 1}, {40, 1}};
  for (int D : {32, 128}) {
    for (auto [Hq, Hkv] : {std::pair{2, 2}, {8, 2}}) {
      for (int bs : {1, 16}) {
        Case c{Hq, Hkv, D, bs, seqs, /*padding=*/1};
        c.fp8 = true;
        run_case(c, rng);
      }
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
