// qk_norm_rope_store against a double-precision reference: per-head RMSNorm, neox rotary
// embedding from a cos/sin table built here, q written out, k/v written to their slots and
// nothing else in the cache touched.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/fp8.h"
#include "cpu_test_util.h"

namespace kestrel {
namespace {

using test::expect_close;
using test::random_f32;
using test::SeqSpec;

// cos in [:, :D/2], sin in [:, D/2:], theta_i = p * 10000^(-2i/D).
Tensor make_cos_sin(int max_pos, int D) {
  Tensor t = Tensor::host(DType::kF32, {max_pos, D});
  for (int p = 0; p < max_pos; ++p) {
    for (int i = 0; i < D / 2; ++i) {
      const double theta = p * std::pow(10000.0, -2.0 * i / D);
      t.data_as<float>()[p * D + i] = static_cast<float>(std::cos(theta));
      t.data_as<float>()[p * D + D / 2 + i] = static_cast<float>(std::sin(theta));
    }
  }
  return t;
}

// Reference for one head: optional RMSNorm with weight w, then rotation at position p.
std::vector<double> ref_head(const float* x, const float* w, double eps, int p, int D) {
  std::vector<double> h(x, x + D);
  if (w != nullptr) {
    double ss = 0.0;
    for (double v : h) ss += v * v;
    const double r = 1.0 / std::sqrt(ss / D + eps);
    for (int i = 0; i < D; ++i) h[i] = h[i] * r * w[i];
  }
  std::vector<double> out(D);
  for (int i = 0; i < D / 2; ++i) {
    const double theta = p * std::pow(10000.0, -2.0 * i / D);
    const double c = std::cos(theta), s = std::sin(theta);
    out[i] = h[i] * c - h[i + D / 2] * s;
    out[i + D / 2] = h[i + D / 2] * c + h[i] * s;
  }
  return out;
}

struct Case {
  int Hq, Hkv, D, block_size;
  bool norm;
};

void run_case(const Case& c, std::mt19937& rng) {
  SCOPED_TRACE(testing::Message() << "Hq " << c.Hq << " Hkv " << c.Hkv << " D " << c.D << " block "
                                  << c.block_size << " norm " << c.norm);
  CpuBackend be(2);
  const std::vector<SeqSpec> seqs{{0, 7}, {20, 1}, {3, 33}, {16, 16}};
  test::PagedBatch pb = test::make_paged_batch(seqs, c.block_size, rng, /*padding=*/2);
  const int T = pb.meta.num_tokens, D = c.D, Hq = c.Hq, Hkv = c.Hkv;
  const int W = (Hq + 2 * Hkv) * D;
  Tensor qkv = random_f32({T, W}, rng, -2.0f, 2.0f);
  Tensor qn = c.norm ? random_f32({D}, rng, 0.5f, 1.5f) : Tensor();
  Tensor kn = c.norm ? random_f32({D}, rng, 0.5f, 1.5f) : Tensor();
  Tensor cos_sin = make_cos_sin(64, D);
  LayerKvCache kv{random_f32({pb.num_blocks, c.block_size, Hkv, D}, rng),
                  random_f32({pb.num_blocks, c.block_size, Hkv, D}, rng)};
  const std::vector<float> k_before(kv.k.data_as<float>(), kv.k.data_as<float>() + kv.k.numel());
  const std::vector<float> v_before(kv.v.data_as<float>(), kv.v.data_as<float>() + kv.v.numel());
  Tensor q_out = be.empty(DType::kF32, {T, Hq * D});
  const float eps = 1e-6f;
  be.qk_norm_rope_store(qkv, qn, kn, eps, cos_sin, {Hq, Hkv, D}, pb.meta, kv, q_out);

  const int32_t* pos = pb.meta.positions.data_as<int32_t>();
  const int32_t* slot = pb.meta.slot_mapping.data_as<int32_t>();
  std::vector<double> k_want(k_before.begin(), k_before.end());
  std::vector<double> v_want(v_before.begin(), v_before.end());
  for (int t = 0; t < T; ++t) {
    const float* row = qkv.data_as<float>() + static_cast<int64_t>(t) * W;
    for (int h = 0; h < Hq; ++h) {
      expect_close(q_out.data_as<float>() + (static_cast<int64_t>(t) * Hq + h) * D,
                   ref_head(row + h * D, c.norm ? qn.data_as<float>() : nullptr, eps, pos[t], D),
                   2e-6, "q");
    }
    if (slot[t] < 0) continue;
    for (int g = 0; g < Hkv; ++g) {
      const std::vector<double> k =
          ref_head(row + (Hq + g) * D, c.norm ? kn.data_as<float>() : nullptr, eps, pos[t], D);
      const int64_t base = (static_cast<int64_t>(slot[t]) * Hkv + g) * D;
      for (int i = 0; i < D; ++i) {
        k_want[base + i] = k[i];
        v_want[base + i] = row[(Hq + Hkv + g) * D + i];
      }
    }
  }
  // Whole caches: the new tokens' slots hold k/v, every other slot is unchanged.
  expect_close(kv.k.data_as<float>(), k_want, 2e-6, "k cache");
  expect_close(kv.v.data_as<float>(), v_want, 0.0, "v cache");
}

TEST(CpuRopeStore, MatchesReferenceOverShapes) {
  std::mt19937 rng(31);
  for (int D : {32, 64, 128}) {
    for (auto [Hq, Hkv] : {std::pair{2, 2}, {4, 2}, {8, 2}}) {
      for (int bs : {1, 16}) {
        for (bool norm : {false, true}) run_case({Hq, Hkv, D, bs, norm}, rng);
      }
    }
  }
}

// The fp8 store against the F32 store of the same inputs (checked above against double):
// every written value is e4m3(x / scale) of the F32 cache's, within e4m3's half step of x
// where it is not clamped, and amax / clamped count what both calls stored.
TEST(CpuRopeStore, Fp8QuantizesAndCountsClamps) {
  std::mt19937 rng(33);
  CpuBackend be(2);
  const int Hq = 4, Hkv = 2, D = 64, bs = 16;
  test::PagedBatch pb = test::make_paged_batch({{0, 9}, {20, 1}, {3, 33}}, bs, rng, 2);
  const int T = pb.meta.num_tokens, W = (Hq + 2 * Hkv) * D;
  const KvCacheSpec spec{1, pb.num_blocks, bs, Hkv, D, DType::kF32};
  KvCacheSpec fp8_spec = spec;
  fp8_spec.dtype = DType::kF8E4M3;
  LayerKvCache ref = be.allocate_kv_cache(spec)[0];
  LayerKvCache kv = be.allocate_kv_cache(fp8_spec)[0];
  ASSERT_TRUE(kv.fp8());
  for (int i = 0; i < 2 * Hkv; ++i) {
    ASSERT_EQ(kv.scale.data_as<float>()[i], 1.0f);
    ASSERT_EQ(kv.amax.data_as<float>()[i], 0.0f);
    ASSERT_EQ(kv.clamped.data_as<int64_t>()[i], 0);
  }
  // K head 1 and V head 1 get scales that clamp |x| > 448 x 2^-8 = 1.75.
  const float scales[] = {0.25f, 0x1p-8f, 1.0f, 0x1p-8f};
  std::copy_n(scales, 4, kv.scale.data_as<float>());
  Tensor kn = random_f32({D}, rng, 0.5f, 1.5f);
  Tensor cos_sin = make_cos_sin(64, D);
  Tensor q_out = be.empty(DType::kF32, {T, Hq * D});
  const int32_t* slot = pb.meta.slot_mapping.data_as<int32_t>();
  std::vector<double> amax(4, 0.0);
  std::vector<int64_t> clamped(4, 0);
  for (int call = 0; call < 2; ++call) {
    Tensor qkv = random_f32({T, W}, rng, -2.0f, 2.0f);
    be.qk_norm_rope_store(qkv, {}, kn, 1e-6f, cos_sin, {Hq, Hkv, D}, pb.meta, ref, q_out);
    be.qk_norm_rope_store(qkv, {}, kn, 1e-6f, cos_sin, {Hq, Hkv, D}, pb.meta, kv, q_out);
    for (int t = 0; t < T; ++t) {
      if (slot[t] < 0) continue;
      for (int i = 0; i < 2; ++i) {
        const float* x = (i == 0 ? ref.k : ref.v).data_as<float>();
        const uint8_t* code = (i == 0 ? kv.k : kv.v).data_as<uint8_t>();
        for (int g = 0; g < Hkv; ++g) {
          const double s = scales[i * Hkv + g];
          for (int d = 0; d < D; ++d) {
            const int64_t at = (int64_t(slot[t]) * Hkv + g) * D + d;
            ASSERT_EQ(code[at], f32_to_e4m3(static_cast<float>(x[at] / s))) << "at " << at;
            const double a = std::abs(double(x[at]));
            amax[i * Hkv + g] = std::max(amax[i * Hkv + g], a);
            if (a / s > 448.0) {
              ++clamped[i * Hkv + g];
              EXPECT_EQ(std::abs(e4m3_to_f32(code[at]) * s), 448.0 * s);
            } else {
              EXPECT_LE(std::abs(e4m3_to_f32(code[at]) * s - x[at]), a / 16 + 0x1p-10 * s);
            }
          }
        }
      }
    }
    for (int i = 0; i < 2 * Hkv; ++i) {
      EXPECT_EQ(kv.amax.data_as<float>()[i], static_cast<float>(amax[i])) << "call " << call;
      EXPECT_EQ(kv.clamped.data_as<int64_t>()[i], clamped[i]) << "call " << call;
    }
  }
  EXPECT_EQ(clamped[0], 0);
  EXPECT_EQ(clamped[2], 0);
  EXPECT_GT(clamped[1], 0);
  EXPECT_GT(clamped[3], 0);
}

TEST(CpuRopeStore, RejectsBadArguments) {
  std::mt19937 rng(32);
  CpuBackend be(1);
  const int D = 32, Hq = 2, Hkv = 1, bs = 4;
  test::PagedBatch pb = test::make_paged_batch({{2, 3}}, bs, rng);
  Tensor qkv = random_f32({3, (Hq + 2 * Hkv) * D}, rng);
  LayerKvCache kv{random_f32({pb.num_blocks, bs, Hkv, D}, rng),
                  random_f32({pb.num_blocks, bs, Hkv, D}, rng)};
  Tensor q_out = be.empty(DType::kF32, {3, Hq * D});
  const AttentionShape shape{Hq, Hkv, D};
  // Rotary table too short for position 4.
  EXPECT_THROW(
      be.qk_norm_rope_store(qkv, {}, {}, 1e-6f, make_cos_sin(4, D), shape, pb.meta, kv, q_out),
      Error);
  Tensor cos_sin = make_cos_sin(16, D);
  // qkv width for the wrong number of heads.
  EXPECT_THROW(be.qk_norm_rope_store(qkv, {}, {}, 1e-6f, cos_sin, {Hq, 2, D}, pb.meta, kv, q_out),
               Error);
  // A slot past the cache.
  pb.meta.slot_mapping.data_as<int32_t>()[1] = pb.num_blocks * bs;
  EXPECT_THROW(be.qk_norm_rope_store(qkv, {}, {}, 1e-6f, cos_sin, shape, pb.meta, kv, q_out),
               Error);
  pb.meta.slot_mapping.data_as<int32_t>()[1] = 0;
  // A position that disagrees with seq_lens.
  pb.meta.positions.data_as<int32_t>()[0] = 0;
  EXPECT_THROW(be.qk_norm_rope_store(qkv, {}, {}, 1e-6f, cos_sin, shape, pb.meta, kv, q_out),
               Error);
  pb.meta.positions.data_as<int32_t>()[0] = 2;
  // Norm weight of the wrong size.
  EXPECT_THROW(be.qk_norm_rope_store(qkv, random_f32({D + 1}, rng), {}, 1e-6f, cos_sin, shape,
                                     pb.meta, kv, q_out),
               Error);
  // Valid again: no throw.
  EXPECT_NO_THROW(be.qk_norm_rope_store(qkv, {}, {}, 1e-6f, cos_sin, shape, pb.meta, kv, q_out));
}

}  // namespace
}  // namespace kestrel
