// qk_norm_rope_store against a double-precision reference: q out, K and V in the paged cache
// at slot_mapping, nothing written for slot -1 or elsewhere in the cache. Into an fp8 cache:
// the bytes core/fp8.h makes of the values the bf16 store writes (every bf16 bit pattern
// among them), the running amax and the clamp counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/fp8.h"
#include "cuda_test_util.h"

namespace kestrel {
namespace {

using namespace cuda_test;

constexpr float kEps = 1e-6f;
constexpr int kMaxPos = 4096;

struct Case {
  int hq, hkv, d, block_size;
  bool norms;
};

void run_case(const Case& c, int t, CudaKvLayout layout, std::mt19937& rng) {
  Backend& be = gpu(layout);
  const int heads = c.hq + 2 * c.hkv;
  const int num_blocks = (t + 3 + c.block_size - 1) / c.block_size + 2;  // spare slots
  const int num_slots = num_blocks * c.block_size;
  Bf16Data qkv = random_bf16(Shape{t, int64_t(heads) * c.d}, rng, -2.0f, 2.0f);
  Bf16Data qn = random_bf16(Shape{c.d}, rng, 0.5f, 1.5f);
  Bf16Data kn = random_bf16(Shape{c.d}, rng, 0.5f, 1.5f);
  Tensor table = rope_table(kMaxPos, c.d, 1e6);
  const float* cs = table.data_as<float>();

  // Distinct random slots; every fifth token (and the first, when T > 1) is padding (-1).
  std::vector<int32_t> slots(num_slots);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(t);
  for (int i = 0; i < t; i += 5) {
    if (t > 1) slots[i] = -1;
  }
  std::vector<int32_t> positions(t);
  std::uniform_int_distribution<int> pick_pos(0, kMaxPos - 1);
  for (int& p : positions) p = pick_pos(rng);

  KvCacheSpec spec{1, num_blocks, c.block_size, c.hkv, c.d, DType::kBF16};
  LayerKvCache kv = be.allocate_kv_cache(spec)[0];
  kv.k = poisoned(DType::kBF16, kv.k.shape(), be);
  kv.v = poisoned(DType::kBF16, kv.v.shape(), be);
  Tensor q_out = poisoned(DType::kBF16, Shape{t, int64_t(c.hq) * c.d}, be);
  AttentionMetadata meta;
  meta.num_tokens = t;
  meta.block_size = c.block_size;
  meta.positions = be.upload(i32_host(positions), DType::kI32);
  meta.slot_mapping = be.upload(i32_host(slots), DType::kI32);
  be.qk_norm_rope_store(be.upload(qkv.host, DType::kBF16),
                           c.norms ? be.upload(qn.host, DType::kBF16) : Tensor(),
                           c.norms ? be.upload(kn.host, DType::kBF16) : Tensor(), kEps,
                           be.upload(table, DType::kF32), AttentionShape{c.hq, c.hkv, c.d},
                           meta, kv, q_out);

  // Reference, head by head.
  const int half = c.d / 2;
  std::vector<double> q_ref(size_t(t) * c.hq * c.d);
  std::vector<double> k_ref(size_t(num_slots) * c.hkv * c.d, NAN);
  std::vector<double> v_ref(k_ref.size(), NAN);
  for (int i = 0; i < t; ++i) {
    for (int h = 0; h < heads; ++h) {
      const double* x = &qkv.values[(size_t(i) * heads + h) * c.d];
      std::vector<double> y(x, x + c.d);
      const bool is_v = h >= c.hq + c.hkv;
      if (!is_v) {
        if (c.norms) {
          const std::vector<double>& w = h < c.hq ? qn.values : kn.values;
          double ss = 0;
          for (double e : y) ss += e * e;
          const double inv = 1.0 / std::sqrt(ss / c.d + kEps);
          for (int e = 0; e < c.d; ++e) y[e] = y[e] * inv * w[e];
        }
        const float* row = cs + size_t(positions[i]) * c.d;
        std::vector<double> r(c.d);
        for (int e = 0; e < half; ++e) {
          r[e] = y[e] * row[e] - y[e + half] * row[half + e];
          r[e + half] = y[e + half] * row[e] + y[e] * row[half + e];
        }
        y = r;
      }
      double* dst;
      if (h < c.hq) {
        dst = &q_ref[(size_t(i) * c.hq + h) * c.d];
      } else {
        if (slots[i] < 0) continue;
        const int kvh = is_v ? h - c.hq - c.hkv : h - c.hq;
        dst = &(is_v ? v_ref : k_ref)[kv_row(layout, slots[i] / c.block_size,
                                             slots[i] % c.block_size, kvh, c.hkv, c.block_size,
                                             c.d)];
      }
      std::copy(y.begin(), y.end(), dst);
    }
  }
  // Up to six bf16 roundings (HF's order) per element, some before a cancelling sum: a
  // wider absolute allowance than the default.
  expect_close(fetch(q_out, be), q_ref, "q", 1e-2, 2e-2, 3e-2);

  // Written slots match; every other cache element is still the NaN poison.
  std::vector<double> k_got = fetch(kv.k, be), v_got = fetch(kv.v, be);
  std::vector<double> k_w, k_r, v_w, v_r;
  for (size_t e = 0; e < k_ref.size(); ++e) {
    if (std::isnan(k_ref[e])) {
      ASSERT_TRUE(std::isnan(k_got[e])) << "stray K write at element " << e;
      ASSERT_TRUE(std::isnan(v_got[e])) << "stray V write at element " << e;
      continue;
    }
    k_w.push_back(k_got[e]);
    k_r.push_back(k_ref[e]);
    ASSERT_EQ(v_got[e], v_ref[e]) << "V is copied exactly, element " << e;
  }
  if (!k_r.empty()) expect_close(k_w, k_r, "k", 1e-2, 2e-2, 3e-2);
}

TEST(CudaQkNormRopeStore, MatchesReference) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(41);
  const Case cases[] = {
      {16, 8, 128, 16, true},   // Qwen3-0.6B
      {16, 8, 128, 1, false},   // Llama-style (no q/k norm), one-token blocks
      {8, 2, 64, 16, true},     // GQA 4, head dim 64
      {4, 4, 256, 16, true},    // MHA, head dim 256
      {8, 1, 64, 1, false},
      {6, 2, 32, 16, true},     // a warp's 8 heads per token: 10 heads leave a partial group
      {3, 1, 16, 16, true},     // head dim 16: 16 heads per warp, 5 of them used
  };
  // 4,500 tokens: a prompt-sized step, which takes the kernel's several-heads-per-warp
  // geometry for every case on GPUs of up to 140 SMs (rope_store.cu, kMinWarpsPerSm).
  std::vector<int> counts = token_counts();
  counts.push_back(4500);
  for (CudaKvLayout layout : {CudaKvLayout::kTokenMajor, CudaKvLayout::kHeadMajor}) {
    for (const Case& c : cases) {
      for (int t : counts) {
        SCOPED_TRACE(testing::Message() << layout_name(layout) << " T " << t << " Hq " << c.hq
                                        << " Hkv " << c.hkv << " D " << c.d << " block "
                                        << c.block_size << " norms " << c.norms);
        run_case(c, t, layout, rng);
      }
    }
  }
}

// The same inputs into a bf16 cache and into an fp8 one with power-of-two scales per (K or V,
// KV head), some small enough that values clamp: each written fp8 byte is the host's
// f32_to_e4m3(bf16 value / scale), NaN (0x7f) elsewhere; amax is the largest |value| stored
// and clamped the number with |value / scale| > 448. With all_bits, the V rows hold every
// bf16 bit pattern (NaN and infinities included): the device conversion matches the host's
// on each, at each scale.
void run_fp8_case(const Case& c, int t, bool all_bits, std::mt19937& rng) {
  const CudaKvLayout layout = CudaKvLayout::kTokenMajor;
  Backend& be = gpu(layout);
  const int heads = c.hq + 2 * c.hkv;
  const int num_blocks = (t + c.block_size - 1) / c.block_size + 1;
  Bf16Data qkv = random_bf16(Shape{t, int64_t(heads) * c.d}, rng, -2.0f, 2.0f);
  if (all_bits) {
    uint32_t pattern = 0;
    for (int i = 0; i < t; ++i) {
      for (int e = (c.hq + c.hkv) * c.d; e < heads * c.d; ++e) {
        qkv.host.data_as<uint16_t>()[size_t(i) * heads * c.d + e] = uint16_t(pattern++);
      }
    }
  }
  std::vector<int32_t> slots(t), positions(t);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots[t / 2] = -1;  // padding
  std::uniform_int_distribution<int> pick_pos(0, kMaxPos - 1);
  for (int& p : positions) p = pick_pos(rng);
  const float choices[] = {0x1p-9f, 0x1p-7f, 0x1p-3f, 1.0f, 4.0f};
  std::uniform_int_distribution<int> pick(0, 4);
  std::vector<float> scales(2 * c.hkv);
  for (float& x : scales) x = choices[pick(rng)];

  AttentionMetadata meta;
  meta.num_tokens = t;
  meta.block_size = c.block_size;
  meta.positions = be.upload(i32_host(positions), DType::kI32);
  meta.slot_mapping = be.upload(i32_host(slots), DType::kI32);
  const Tensor qkv_d = be.upload(qkv.host, DType::kBF16);
  const Tensor qn = c.norms ? be.upload(random_bf16(Shape{c.d}, rng, 0.5f, 1.5f).host, DType::kBF16) : Tensor();
  const Tensor kn = c.norms ? be.upload(random_bf16(Shape{c.d}, rng, 0.5f, 1.5f).host, DType::kBF16) : Tensor();
  const Tensor table = be.upload(rope_table(kMaxPos, c.d, 1e6), DType::kF32);
  const AttentionShape shape{c.hq, c.hkv, c.d};
  auto store = [&](DType dtype) {
    LayerKvCache kv = upload_kv(be, nan_kv_cache(layout, num_blocks, c.hkv, c.block_size, c.d, dtype), scales);
    Tensor q_out = poisoned(DType::kBF16, Shape{t, int64_t(c.hq) * c.d}, be);
    be.qk_norm_rope_store(qkv_d, qn, kn, kEps, table, shape, meta, kv, q_out);
    return kv;
  };
  const LayerKvCache ref = store(DType::kBF16);
  const LayerKvCache got = store(DType::kF8E4M3);

  std::vector<double> amax(2 * c.hkv, 0.0);
  std::vector<int64_t> clamped(2 * c.hkv, 0);
  int wrong = 0;
  for (int which = 0; which < 2; ++which) {
    const Tensor r = be.to_host(which == 0 ? ref.k : ref.v);
    const Tensor g = be.to_host(which == 0 ? got.k : got.v);
    for (int64_t e = 0; e < r.numel(); ++e) {
      const uint16_t bits = r.data_as<uint16_t>()[e];
      const uint8_t byte = g.data_as<uint8_t>()[e];
      const int h = static_cast<int>((e / c.d) % c.hkv);
      const float x = bf16_to_f32(bits);
      if (bits == 0x7fc0 && byte == 0x7f) continue;  // nothing written (or a NaN, stored as NaN)
      const float scale = scales[which * c.hkv + h];
      const uint8_t want = f32_to_e4m3(x / scale);
      if (byte != want && ++wrong <= 5) {
        ADD_FAILURE() << (which == 0 ? "K" : "V") << " element " << e << ": bf16 " << x
                      << " scale " << scale << " stored " << int(byte) << ", expected " << int(want);
      }
      if (!std::isnan(x)) amax[which * c.hkv + h] = std::max(amax[which * c.hkv + h], double(std::fabs(x)));
      if (std::fabs(x / scale) > kE4M3Max) ++clamped[which * c.hkv + h];
    }
  }
  EXPECT_EQ(wrong, 0) << "fp8 bytes that differ from the host conversion";
  const Tensor amax_got = be.to_host(got.amax), clamped_got = be.to_host(got.clamped);
  for (int i = 0; i < 2 * c.hkv; ++i) {
    EXPECT_EQ(amax_got.data_as<float>()[i], float(amax[i])) << "amax " << i;
    EXPECT_EQ(clamped_got.data_as<int64_t>()[i], clamped[i]) << "clamped " << i;
  }
}

TEST(CudaQkNormRopeStore, Fp8CacheMatchesHostConversion) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(42);
  const Case cases[] = {{16, 8, 128, 16, true}, {8, 2, 64, 1, false}, {4, 4, 256, 16, true},
                        {2, 1, 16, 16, true}};
  for (const Case& c : cases) {
    for (int t : token_counts()) {
      SCOPED_TRACE(testing::Message() << "T " << t << " Hq " << c.hq << " Hkv " << c.hkv << " D "
                                      << c.d << " norms " << c.norms);
      run_fp8_case(c, t, false, rng);
    }
  }
  for (int rep = 0; rep < 3; ++rep) {  // 65,536 V values: every bf16 pattern once per run
    SCOPED_TRACE(testing::Message() << "all bf16 patterns, run " << rep);
    run_fp8_case(Case{2, 1, 128, 16, true}, 512, true, rng);
  }
}

}  // namespace
}  // namespace kestrel
