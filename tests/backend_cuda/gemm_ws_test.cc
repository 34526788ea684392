// The prompt-sized wgmma GEMM (gemm_ws.h) against a double-precision reference written here:
// odd T (partial token tiles), K not a multiple of the 64-wide block, several tiles per CTA
// (the persistent ring across tiles), NaN in the rows of x and out past T; and the SwiGLU
// epilogue bit-for-bit against activation.cu's rounding applied to the same product. Runs on
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
