// qk_norm_rope_store against a double-precision reference: q out, K and V in the paged cache
// at slot_mapping, nothing written for slot -1 or elsewhere in the cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

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
  };
  for (CudaKvLayout layout : {CudaKvLayout::kTokenMajor, CudaKvLayout::kHeadMajor}) {
    for (const Case& c : cases) {
      for (int t : token_counts()) {
        SCOPED_TRACE(testing::Message() << layout_name(layout) << " T " << t << " Hq " << c.hq
                                        << " Hkv " << c.hkv << " D " << c.d << " block "
                                        << c.block_size << " norms " << c.norms);
        run_case(c, t, layout, rng);
      }
    }
  }
}

}  // namespace
}  // namespace kestrel
