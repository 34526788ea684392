// The prompt-sized wgmma GEMM (gemm_ws.h) against a double-precision reference written here:
// odd T (partial token tiles), K not a multiple of the 64-wide block, several tiles per CTA
// (the persistent ring across tiles), NaN in the rows of x and out past T; and the SwiGLU and
// RoPE/store epilogues bit for bit against the unfused kernels applied to the same product. Runs on
// compute capability 9.0 only (the kernel is built for sm_90a alone).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backend/cuda/gemm/gemm_ws.h"
#include "backend/cuda/launch.h"
#include "cuda_test_util.h"

namespace kestrel {
namespace {

using namespace cuda_test;
using kernels::GemmWsEpilogue;
using kernels::bf16;

#define KS_REQUIRE_SM90()                                                          \
  KS_REQUIRE_GPU();                                                                \
  gpu();                                                                           \
  if (kernels::compute_capability() != 90) GTEST_SKIP() << "needs compute capability 9.0"

double round_bf16(double v) { return bf16_to_f32(f32_to_bf16(static_cast<float>(v))); }

// HF's bf16 Qwen3MLP on exact products: act_fn(gate) and the product each rounded to bf16.
double silu_mul_ref(double gate, double up) {
  const double g = round_bf16(gate);
  const double s = round_bf16(g / (1.0 + std::exp(-g)));
  return round_bf16(s * round_bf16(up));
}

// The SwiGLU of a [t, 2 inter] product (gate columns first).
std::vector<double> swiglu_ref(const std::vector<double>& gate_up, int t, int inter) {
  std::vector<double> out(size_t(t) * inter);
  for (int i = 0; i < t; ++i) {
    for (int j = 0; j < inter; ++j) {
      const double* r = &gate_up[size_t(i) * 2 * inter];
      out[size_t(i) * inter + j] = silu_mul_ref(r[j], r[inter + j]);
    }
  }
  return out;
}

// Runs the kernel into an output with 3 NaN rows past T, checks they stay NaN, returns the
// first t rows.
std::vector<double> run(const Tensor& x, const Tensor& w, int t, int n, int k, GemmWsEpilogue e,
                        int num_sms) {
  const int cols = e == GemmWsEpilogue::kStore ? n : n / 2;
  Tensor out = poisoned(DType::kBF16, Shape{t + 3, cols});
  gpu().synchronize();
  EXPECT_TRUE(kernels::gemm_ws_supported(t, n, k, x.data(), w.data(), out.data()));
  kernels::gemm_ws(x.data(), w.data(), out.data(), t, n, k, e, num_sms, nullptr);
  EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  std::vector<double> got = fetch(out);
  for (size_t i = size_t(t) * cols; i < got.size(); ++i) {
    EXPECT_TRUE(std::isnan(got[i])) << "wrote past row T at element " << i;
    if (!std::isnan(got[i])) break;
  }
  got.resize(size_t(t) * cols);
  return got;
}

TEST(GemmWs, MatchesReferenceOnOddShapes) {
  KS_REQUIRE_SM90();
  std::mt19937 rng(81);
  struct S {
    int n, k;
  };
  const S shapes[] = {{256, 64}, {512, 200}, {768, 1024}};
  for (const S& s : shapes) {
    Bf16Data w = random_bf16(Shape{s.n, s.k}, rng, -0.1f, 0.1f);
    Tensor w_d = gpu().upload(w.host, DType::kBF16);
    for (int t : {1, 50, 128, 129, 300}) {
      Bf16Data x = random_bf16(Shape{t, s.k}, rng);
      Tensor x_d = upload_x_with_nan_tail(x, t, s.k, 8);
      const std::vector<double> ref = linear_ref(x, w, nullptr, t, s.n, s.k);
      // 132 CTAs: one tile each; 3 and 1: several tiles per CTA through one ring.
      for (int sms : {132, 3, 1}) {
        SCOPED_TRACE(testing::Message() << "T " << t << " N " << s.n << " K " << s.k << " CTAs "
                                        << sms);
        expect_close(run(x_d, w_d, t, s.n, s.k, GemmWsEpilogue::kStore, sms), ref, "store", 4e-3,
                     8e-3, 1e-3);
        expect_close(run(x_d, w_d, t, s.n, s.k, GemmWsEpilogue::kSiluMul, sms),
                     swiglu_ref(ref, t, s.n / 2), "silu_mul", 1e-2, 2e-2, 1e-2);
      }
    }
  }
}

// The fused activation is the engine's unfused path bit for bit: the store epilogue's
// product, then the backend's silu_mul kernel (activation.cu), on Qwen3-0.6B's gate_up shape
// (both epilogues see the same accumulators); and the same bits on every run.
TEST(GemmWs, SiluMulEpilogueIsTheUnfusedActivationBitForBit) {
  KS_REQUIRE_SM90();
  std::mt19937 rng(82);
  const int t = 200, inter = 3072, k = 1024;
  Bf16Data w = random_bf16(Shape{2 * inter, k}, rng, -0.1f, 0.1f);
  Bf16Data x = random_bf16(Shape{t, k}, rng);
  Tensor w_d = gpu().upload(w.host, DType::kBF16);
  Tensor x_d = gpu().upload(x.host, DType::kBF16);
  Tensor product = poisoned(DType::kBF16, Shape{t, 2 * inter});
  Tensor unfused = poisoned(DType::kBF16, Shape{t, inter});
  gpu().synchronize();
  kernels::gemm_ws(x_d.data(), w_d.data(), product.data(), t, 2 * inter, k,
                   GemmWsEpilogue::kStore, 132, nullptr);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  gpu().silu_mul(product, unfused);
  gpu().synchronize();
  const std::vector<double> ref = linear_ref(x, w, nullptr, t, 2 * inter, k);
  expect_close(fetch(product), ref, "gate_up", 4e-3, 8e-3, 1e-3);
  const std::vector<double> fused = run(x_d, w_d, t, 2 * inter, k, GemmWsEpilogue::kSiluMul, 132);
  const std::vector<double> expected = fetch(unfused);
  int mismatches = 0;
  for (size_t i = 0; i < fused.size(); ++i) {
    if (fused[i] != expected[i] && ++mismatches <= 5) {
      ADD_FAILURE() << "element " << i << ": fused " << fused[i] << ", unfused " << expected[i];
    }
  }
  EXPECT_EQ(mismatches, 0);
  expect_close(fused, swiglu_ref(ref, t, inter), "silu_mul", 1e-2, 2e-2, 1e-2);
  EXPECT_EQ(run(x_d, w_d, t, 2 * inter, k, GemmWsEpilogue::kSiluMul, 132), fused);
}

TEST(GemmWs, ModelShapesMatchReference) {
  KS_REQUIRE_SM90();
  std::mt19937 rng(83);
  struct S {
    int k, n;
  };
  const S shapes[] = {{1024, 4096}, {2048, 1024}, {3072, 1024}};
  for (const S& s : shapes) {
    Bf16Data w = random_bf16(Shape{s.n, s.k}, rng, -0.1f, 0.1f);
    Bf16Data x = random_bf16(Shape{333, s.k}, rng);
    Tensor w_d = gpu().upload(w.host, DType::kBF16);
    Tensor x_d = gpu().upload(x.host, DType::kBF16);
    SCOPED_TRACE(testing::Message() << "K " << s.k << " N " << s.n);
    expect_close(run(x_d, w_d, 333, s.n, s.k, GemmWsEpilogue::kStore, 132),
                 linear_ref(x, w, nullptr, 333, s.n, s.k), "model shape", 4e-3, 8e-3, 1e-3);
  }
}

// Backend::linear_silu_mul on the CUDA backend: prompt-sized steps take the fused kernel
// (GemmRunner::run_silu_mul), small ones the product and silu_mul; both match the reference,
// and a mis-shaped output is refused with a message that names the op.
TEST(GemmWs, BackendLinearSiluMul) {
  KS_REQUIRE_SM90();
  std::mt19937 rng(84);
  const int inter = 256, k = 128;
  Bf16Data w = random_bf16(Shape{2 * inter, k}, rng, -0.2f, 0.2f);
  Tensor w_d = gpu().upload(w.host, DType::kBF16);
  for (int t : {100, 2100}) {
    SCOPED_TRACE(testing::Message() << "T " << t);
    Bf16Data x = random_bf16(Shape{t, k}, rng);
    Tensor x_d = gpu().upload(x.host, DType::kBF16);
    Tensor gate_up = poisoned(DType::kBF16, Shape{t, 2 * inter});
    Tensor out = poisoned(DType::kBF16, Shape{t, inter});
    gpu().linear_silu_mul(x_d, w_d, gate_up, out);
    gpu().synchronize();
    expect_close(fetch(out), swiglu_ref(linear_ref(x, w, nullptr, t, 2 * inter, k), t, inter),
                 "linear_silu_mul", 1e-2, 2e-2, 1e-2);
  }
  Tensor x_d = gpu().upload(random_bf16(Shape{4, k}, rng).host, DType::kBF16);
  Tensor gate_up = gpu().empty(DType::kBF16, Shape{4, 2 * inter});
  Tensor wrong = gpu().empty(DType::kBF16, Shape{4, inter + 1});
  try {
    gpu().linear_silu_mul(x_d, w_d, gate_up, wrong);
    FAIL() << "a mis-shaped output was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("linear_silu_mul"), std::string::npos) << e.what();
  }
}

// Raw bytes of a device tensor (NaN-aware equality: unwritten slots stay NaN on both sides).
std::vector<uint8_t> bytes_of(const Tensor& t, Backend& be) {
  Tensor h = be.to_host(t);
  const auto* p = static_cast<const uint8_t*>(h.data());
  return std::vector<uint8_t>(p, p + h.nbytes());
}

// The qkv product with qk_norm_rope_store as its epilogue writes what the plain product
// followed by the qk_norm_rope_store kernel writes, bit for bit: q, and K and V at their slots
// (slots of -1 and the rest of the NaN cache untouched), both KV layouts, positions past the
// table (clamped), T not a multiple of 64, one tile per CTA and several.
TEST(GemmWs, QkvRopeEpilogueIsTheUnfusedStoreBitForBit) {
  KS_REQUIRE_SM90();
  std::mt19937 rng(85);
  const int hq = 4, hkv = 2, d = 128, k = 256, t = 300, bs = 16, max_pos = 512;
  const int n = (hq + 2 * hkv) * d, num_blocks = (t + bs - 1) / bs + 3;
  Bf16Data w = random_bf16(Shape{n, k}, rng, -0.1f, 0.1f);
  Bf16Data x = random_bf16(Shape{t, k}, rng);
  Bf16Data q_norm = random_bf16(Shape{d}, rng, 0.5f, 1.5f);
  Bf16Data k_norm = random_bf16(Shape{d}, rng, 0.5f, 1.5f);
  std::vector<int32_t> positions(t), slots = shuffled_order(num_blocks * bs, rng);
  std::uniform_int_distribution<int> pos_dist(0, max_pos + 40);
  for (int i = 0; i < t; ++i) positions[i] = pos_dist(rng);
  slots.resize(t);
  for (int i = 0; i < t; i += 7) slots[i] = -1;
  for (CudaKvLayout layout : {CudaKvLayout::kTokenMajor, CudaKvLayout::kHeadMajor}) {
    Backend& be = gpu(layout);
    SCOPED_TRACE(layout_name(layout));
    Tensor w_d = be.upload(w.host, DType::kBF16);
    Tensor x_d = be.upload(x.host, DType::kBF16);
    Tensor qn = be.upload(q_norm.host, DType::kBF16);
    Tensor kn = be.upload(k_norm.host, DType::kBF16);
    Tensor cs = be.upload(rope_table(max_pos, d, 1e6), DType::kF32);
    Tensor cs16 = be.upload(rope_table(max_pos, d, 1e6), DType::kBF16);  // rounded on upload
    Tensor pos = be.upload(i32_host(positions), DType::kI32);
    Tensor slot = be.upload(i32_host(slots), DType::kI32);
    const HostKv host_kv = nan_kv_cache(layout, num_blocks, hkv, bs, d);
    auto args = [&](const Tensor& qkv, Tensor& q, LayerKvCache& kv) {
      kernels::QkNormRopeArgs a;
      a.qkv = static_cast<const bf16*>(qkv.data());
      a.q_norm = static_cast<const bf16*>(qn.data());
      a.k_norm = static_cast<const bf16*>(kn.data());
      a.cos_sin = static_cast<const float*>(cs.data());
      a.cos_sin_bf16 = static_cast<const bf16*>(cs16.data());
      a.positions = static_cast<const int32_t*>(pos.data());
      a.slot_mapping = static_cast<const int32_t*>(slot.data());
      a.q_out = static_cast<bf16*>(q.data());
      a.k_cache = kv.k.data();
      a.v_cache = kv.v.data();
      a.kv_head_major = layout == CudaKvLayout::kHeadMajor;
      a.block_size = bs;
      a.eps = 1e-6f;
      a.num_tokens = t;
      a.num_q_heads = hq;
      a.num_kv_heads = hkv;
      a.head_dim = d;
      a.max_pos = max_pos;
      return a;
    };
    // Unfused: the store epilogue's product, then the RoPE/store kernel.
    Tensor qkv = poisoned(DType::kBF16, Shape{t, n}, be);
    Tensor q_ref = poisoned(DType::kBF16, Shape{t, hq * d}, be);
    LayerKvCache kv_ref = upload_kv(be, host_kv);
    be.synchronize();
    kernels::gemm_ws(x_d.data(), w_d.data(), qkv.data(), t, n, k, GemmWsEpilogue::kStore, 132,
                     nullptr);
    kernels::qk_norm_rope_store(args(qkv, q_ref, kv_ref), nullptr);
    ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
    for (int sms : {132, 3}) {
      SCOPED_TRACE(testing::Message() << sms << " CTAs");
      Tensor q = poisoned(DType::kBF16, Shape{t, hq * d}, be);
      LayerKvCache kv = upload_kv(be, host_kv);
      be.synchronize();
      const kernels::QkNormRopeArgs a = args(qkv, q, kv);
      ASSERT_TRUE(kernels::gemm_ws_rope_supported(t, n, k, x_d.data(), w_d.data(), a));
      kernels::gemm_ws_rope(x_d.data(), w_d.data(), t, n, k, a, sms, nullptr);
      ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
      EXPECT_TRUE(bytes_of(q, be) == bytes_of(q_ref, be)) << "q differs";
      EXPECT_TRUE(bytes_of(kv.k, be) == bytes_of(kv_ref.k, be)) << "K cache differs";
      EXPECT_TRUE(bytes_of(kv.v, be) == bytes_of(kv_ref.v, be)) << "V cache differs";
    }
    // What the fused path does not take: odd head counts, an fp8 cache, no bf16 cos/sin.
    Tensor q = poisoned(DType::kBF16, Shape{t, hq * d}, be);
    kernels::QkNormRopeArgs a = args(qkv, q, kv_ref);
    a.num_q_heads = 3;
    EXPECT_FALSE(kernels::gemm_ws_rope_supported(t, n - d, k, x_d.data(), w_d.data(), a));
    a = args(qkv, q, kv_ref);
    a.kv.fp8 = true;
    EXPECT_FALSE(kernels::gemm_ws_rope_supported(t, n, k, x_d.data(), w_d.data(), a));
    a = args(qkv, q, kv_ref);
    a.cos_sin_bf16 = nullptr;
    EXPECT_FALSE(kernels::gemm_ws_rope_supported(t, n, k, x_d.data(), w_d.data(), a));
  }
}

TEST(GemmWs, SupportedShapes) {
  alignas(16) static const uint16_t buf[16] = {};
  const void* a = buf;
  const void* odd = buf + 1;
  EXPECT_TRUE(kernels::gemm_ws_supported(8192, 6144, 1024, a, a, a));
  EXPECT_TRUE(kernels::gemm_ws_supported(1, 256, 8, a, a, a));
  EXPECT_FALSE(kernels::gemm_ws_supported(0, 256, 64, a, a, a));
  EXPECT_FALSE(kernels::gemm_ws_supported(16, 1000, 64, a, a, a));
  EXPECT_FALSE(kernels::gemm_ws_supported(16, 128, 64, a, a, a));
  EXPECT_FALSE(kernels::gemm_ws_supported(16, 256, 60, a, a, a));
  EXPECT_FALSE(kernels::gemm_ws_supported(16, 256, 64, odd, a, a));
  EXPECT_FALSE(kernels::gemm_ws_supported(16, 256, 64, a, odd, a));
  EXPECT_FALSE(kernels::gemm_ws_supported(16, 256, 64, a, a, odd));
}

}  // namespace
}  // namespace kestrel
