// The small-batch GEMM kernel (gemv.h), through GemmRunner and CudaBackend::linear, against a
// double-precision reference written here; the dispatch between it and cuBLASLt; and the
// timing of cuBLASLt candidates for decode-sized shapes.
#include <gtest/gtest.h>

#include <cstdlib>

#include "backend/cuda/gemm/gemm.h"
#include "backend/cuda/gemm/gemv.h"
#include "cuda_test_util.h"

namespace kestrel {
namespace {

using namespace cuda_test;

// out[t, n] = sum_k x[t, k] w[n, k], without bias (added by the callers).
std::vector<double> matmul_ref(const Bf16Data& x, const Bf16Data& w, int t, int n, int k) {
  std::vector<double> out(size_t(t) * n);
  for (int j = 0; j < n; ++j) {
    const double* wr = &w.values[size_t(j) * k];
    for (int i = 0; i < t; ++i) {
      const double* xr = &x.values[size_t(i) * k];
      double s = 0;
      for (int c = 0; c < k; ++c) s += xr[c] * wr[c];
      out[size_t(i) * n + j] = s;
    }
  }
  return out;
}

std::vector<double> with_bias(std::vector<double> out, const Bf16Data& bias, int n) {
  for (size_t i = 0; i < out.size(); ++i) out[i] += bias.values[i % n];
  return out;
}

TEST(CudaGemv, MatchesReferenceOverOddShapes) {
  KS_REQUIRE_GPU();
  GemmRunner runner(nullptr);  // legacy default stream: ordered with the uploads below
  runner.set_gemv_max_tokens(kernels::kGemvMaxTokens);
  std::mt19937 rng(41);
  const int ns[] = {1, 7, 1000, 4096 + 8};
  const int ks[] = {8, 1032, 3072};
  const int ts[] = {1, 2, 3, 5, 8, 16};
  for (int k : ks) {
    for (int n : ns) {
      Bf16Data w = random_bf16(Shape{n, k}, rng);
      Bf16Data bias = random_bf16(Shape{n}, rng);
      Tensor w_d = gpu().upload(w.host, DType::kBF16);
      Tensor bias_d = gpu().upload(bias.host, DType::kBF16);
      for (int t : ts) {
        Bf16Data x = random_bf16(Shape{t, k}, rng);
        Tensor x_d = gpu().upload(x.host, DType::kBF16);
        const std::vector<double> ref = matmul_ref(x, w, t, n, k);
        // The output type and the bias alternate over the sweep (both appear for every
        // t, n and k across the two passes).
        for (int pass = 0; pass < 2; ++pass) {
          const bool f32 = (pass + t + n) % 2 == 0;
          const bool add_bias = pass == 1 && !f32;
          SCOPED_TRACE(testing::Message() << "T " << t << " N " << n << " K " << k
                                          << (f32 ? " F32" : " BF16") << " bias " << add_bias);
          Tensor out = poisoned(f32 ? DType::kF32 : DType::kBF16, Shape{t, n});
          gpu().synchronize();
          runner.run(x_d.data(), w_d.data(), add_bias ? bias_d.data() : nullptr, out.data(),
                     f32 ? CUDA_R_32F : CUDA_R_16BF, t, n, k);
          ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
          const std::vector<double> want = add_bias ? with_bias(ref, bias, n) : ref;
          if (f32) {
            expect_close(fetch(out), want, "gemv f32", 1e-4, 1e-3, 1e-4);
          } else {
            expect_close(fetch(out), want, "gemv bf16");
          }
        }
      }
    }
  }
  EXPECT_EQ(runner.num_plans(), 0u) << "every call above should have taken the gemv kernel";
}

// Every K split gives the same result as the reference (the split changes only which warps
// add which part of K; odd K leaves some warps with none; T > 8 caps the split at 8).
TEST(CudaGemv, EveryKSplitMatchesReference) {
  KS_REQUIRE_GPU();
  gpu();
  std::mt19937 rng(42);
  const int n = 37, k = 1032;
  Bf16Data w = random_bf16(Shape{n, k}, rng);
  Bf16Data bias = random_bf16(Shape{n}, rng);
  Tensor w_d = gpu().upload(w.host, DType::kBF16);
  Tensor bias_d = gpu().upload(bias.host, DType::kBF16);
  for (int t : {5, 13}) {
    Bf16Data x = random_bf16(Shape{t, k}, rng);
    Tensor x_d = gpu().upload(x.host, DType::kBF16);
    const std::vector<double> want = with_bias(matmul_ref(x, w, t, n, k), bias, n);
    for (int split : {1, 2, 4, 8, 16}) {
      SCOPED_TRACE(testing::Message() << "T " << t << " k_split " << split);
      Tensor out = poisoned(DType::kF32, Shape{t, n});
      gpu().synchronize();
      kernels::gemv(x_d.data(), w_d.data(), bias_d.data(), out.data(), true, t, n, k, 132,
                    nullptr, split);
      ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
      expect_close(fetch(out), want, "gemv split", 1e-4, 1e-3, 1e-4);
    }
  }
}

// The production entry point: linear() with small T on the Qwen3-0.6B shapes, including the
// LM head's F32 logits (a slice of the vocabulary: the reference is on the CPU).
TEST(CudaGemv, LinearOnModelShapes) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(43);
  struct S {
    int k, n;
    bool f32;
  };
  const S shapes[] = {{1024, 4096, false}, {2048, 1024, false}, {1024, 6144, false},
                      {3072, 1024, false}, {1024, 15203, true}};
  for (const S& s : shapes) {
    Bf16Data w = random_bf16(Shape{s.n, s.k}, rng);
    Tensor w_d = gpu().upload(w.host, DType::kBF16);
    for (int t : {1, 4, 13}) {
      SCOPED_TRACE(testing::Message() << "T " << t << " K " << s.k << " N " << s.n);
      Bf16Data x = random_bf16(Shape{t, s.k}, rng);
      Tensor out = poisoned(s.f32 ? DType::kF32 : DType::kBF16, Shape{t, s.n});
      gpu().linear(gpu().upload(x.host, DType::kBF16), w_d, Tensor(), out);
      const std::vector<double> want = matmul_ref(x, w, t, s.n, s.k);
      if (s.f32) expect_close(fetch(out), want, "linear f32", 1e-4, 1e-3, 1e-4);
      else expect_close(fetch(out), want, "linear bf16");
    }
  }
}

TEST(CudaGemv, SupportedOnlyForSmallAlignedCalls) {
  alignas(16) static const uint16_t buf[16] = {};
  const void* a = buf;
  const void* odd = buf + 1;  // 2-byte aligned
  EXPECT_TRUE(kernels::gemv_supported(1, 1, 8, a, a));
  EXPECT_TRUE(kernels::gemv_supported(16, 151936, 3072, a, a));
  EXPECT_FALSE(kernels::gemv_supported(0, 8, 8, a, a));
  EXPECT_FALSE(kernels::gemv_supported(17, 8, 8, a, a));
  EXPECT_FALSE(kernels::gemv_supported(1, 8, 12, a, a));  // K not a multiple of 8
  EXPECT_FALSE(kernels::gemv_supported(1, 8, 8, odd, a));
  EXPECT_FALSE(kernels::gemv_supported(1, 8, 8, a, odd));
}

TEST(CudaGemv, KSplitGivesEachWarpOneBatch) {
  // K steps of 32 elements, 8 per warp; 8-column tiles; 132 SMs x 32 warps a wave.
  EXPECT_EQ(kernels::gemv_k_split(1, 1024, 3072, 132), 16);   // 96 steps: 6 per warp
  EXPECT_EQ(kernels::gemv_k_split(1, 1024, 2048, 132), 8);    // 64 steps
  EXPECT_EQ(kernels::gemv_k_split(1, 4096, 1024, 132), 4);    // 32 steps
  EXPECT_EQ(kernels::gemv_k_split(1, 6144, 1024, 132), 4);
  EXPECT_EQ(kernels::gemv_k_split(16, 1024, 3072, 132), 8);   // T > 8: at most 8 warps
  EXPECT_EQ(kernels::gemv_k_split(1, 8, 64, 132), 1);         // two steps: one warp
  EXPECT_EQ(kernels::gemv_k_split(1, 151936, 1024, 132), 1);  // 18992 tiles: many waves
  EXPECT_EQ(kernels::gemv_k_split(1, 32768, 4096, 132), 2);   // 4096 tiles x 2 <= 2 waves
}

// GemmRunner's defaults: the kernel up to kDefaultGemvMaxTokens and kGemvMaxWeightBytes of
// weights, cuBLASLt beyond either (one plan each).
TEST(CudaGemv, DefaultDispatch) {
  KS_REQUIRE_GPU();
  if (std::getenv("KESTREL_GEMV_MAX_TOKENS") != nullptr) GTEST_SKIP() << "threshold overridden";
  gpu();
  GemmRunner runner(nullptr);
  ASSERT_EQ(runner.gemv_max_tokens(), GemmRunner::kDefaultGemvMaxTokens);
  std::mt19937 rng(46);
  const int k = 1024;
  const int big_n = static_cast<int>(GemmRunner::kGemvMaxWeightBytes / (2 * k)) + 8;
  Bf16Data w = random_bf16(Shape{big_n, k}, rng);  // the smaller cases use its first rows
  Tensor w_d = gpu().upload(w.host, DType::kBF16);
  struct Case {
    int t, n;
    size_t plans_after;
  };
  const int t_max = GemmRunner::kDefaultGemvMaxTokens;
  const Case cases[] = {{t_max, 200, 0}, {t_max + 1, 200, 1}, {2, big_n, 2}};
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "T " << c.t << " N " << c.n);
    Bf16Data x = random_bf16(Shape{c.t, k}, rng);
    Tensor x_d = gpu().upload(x.host, DType::kBF16);
    Tensor out = poisoned(DType::kBF16, Shape{c.t, c.n});
    gpu().synchronize();
    runner.run(x_d.data(), w_d.data(), nullptr, out.data(), CUDA_R_16BF, c.t, c.n, k);
    ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
    EXPECT_EQ(runner.num_plans(), c.plans_after);
    expect_close(fetch(out), matmul_ref(x, w, c.t, c.n, k), "default dispatch");
  }
}

// Calls the kernel cannot take go to cuBLASLt (one plan each) and still give the right result.
TEST(CudaGemv, FallsBackToCublasLt) {
  KS_REQUIRE_GPU();
  gpu();
  GemmRunner runner(nullptr);
  runner.set_gemv_max_tokens(8);
  std::mt19937 rng(44);
  struct Case {
    int t, k;
    const char* why;
  };
  const Case cases[] = {{12, 72, "t above the threshold"}, {3, 76, "K not a multiple of 8"}};
  const int n = 40;
  size_t plans = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.why);
    Bf16Data w = random_bf16(Shape{n, c.k}, rng);
    Bf16Data x = random_bf16(Shape{c.t, c.k}, rng);
    Tensor w_d = gpu().upload(w.host, DType::kBF16);
    Tensor x_d = gpu().upload(x.host, DType::kBF16);
    Tensor out = poisoned(DType::kBF16, Shape{c.t, n});
    gpu().synchronize();
    runner.run(x_d.data(), w_d.data(), nullptr, out.data(), CUDA_R_16BF, c.t, n, c.k);
    EXPECT_EQ(runner.num_plans(), ++plans);
    ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
    expect_close(fetch(out), matmul_ref(x, w, c.t, n, c.k), c.why);
  }
  // Turned off: a call the kernel could take goes to cuBLASLt too.
  runner.set_gemv_max_tokens(0);
  Bf16Data w = random_bf16(Shape{n, 64}, rng);
  Bf16Data x = random_bf16(Shape{2, 64}, rng);
  Tensor w_d = gpu().upload(w.host, DType::kBF16);
  Tensor x_d = gpu().upload(x.host, DType::kBF16);
  Tensor out = poisoned(DType::kBF16, Shape{2, n});
  gpu().synchronize();
  runner.run(x_d.data(), w_d.data(), nullptr, out.data(), CUDA_R_16BF, 2, n, 64);
  EXPECT_EQ(runner.num_plans(), plans + 1);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  expect_close(fetch(out), matmul_ref(x, w, 2, n, 64), "gemv turned off");
}

// cuBLASLt algorithm timing: never inside a stream capture (the captured call keeps the
// heuristic's answer), then once at the first call outside one; large T are never timed.
TEST(CudaGemmTuning, TimesCandidatesOutsideCaptureOnly) {
  KS_REQUIRE_GPU();
  gpu();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  {
    GemmRunner runner(stream);
    runner.set_tune_algorithms(true);
    runner.set_wgmma_gemm(false);  // cuBLASLt's candidates are what this test times
    std::mt19937 rng(45);
    const int t = 100, n = 384, k = 512;
    Bf16Data x = random_bf16(Shape{t, k}, rng);
    Bf16Data w = random_bf16(Shape{n, k}, rng);
    Tensor x_d = gpu().upload(x.host, DType::kBF16);
    Tensor w_d = gpu().upload(w.host, DType::kBF16);
    Tensor out = poisoned(DType::kBF16, Shape{t, n});
    gpu().synchronize();
    const std::vector<double> want = matmul_ref(x, w, t, n, k);

    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    runner.run(x_d.data(), w_d.data(), nullptr, out.data(), CUDA_R_16BF, t, n, k);
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    EXPECT_EQ(runner.num_plans(), 1u);
    EXPECT_EQ(runner.num_tuned(), 0u);
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    expect_close(fetch(out), want, "captured, heuristic algorithm");
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);

    Tensor out2 = poisoned(DType::kBF16, Shape{t, n});
    gpu().synchronize();
    runner.run(x_d.data(), w_d.data(), nullptr, out2.data(), CUDA_R_16BF, t, n, k);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(runner.num_plans(), 1u);
    EXPECT_EQ(runner.num_tuned(), 1u) << "cuBLASLt offered a single candidate?";
    expect_close(fetch(out2), want, "timed algorithm");

    const int big_t = 600;  // above kTuneMaxTokens
    Bf16Data xb = random_bf16(Shape{big_t, k}, rng);
    Tensor xb_d = gpu().upload(xb.host, DType::kBF16);
    Tensor out3 = poisoned(DType::kBF16, Shape{big_t, n});
    gpu().synchronize();
    runner.run(xb_d.data(), w_d.data(), nullptr, out3.data(), CUDA_R_16BF, big_t, n, k);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(runner.num_plans(), 2u);
    EXPECT_EQ(runner.num_tuned(), 1u);
    expect_close(fetch(out3), matmul_ref(xb, w, big_t, n, k), "large t, heuristic algorithm");
  }
  cudaStreamDestroy(stream);
}

// Decode-step shapes whose output has few tiles: whichever candidate the tuner keeps must
// give the product, on the call that timed it and after.
TEST(CudaGemmTuning, TunedChoiceGivesTheProductOnDecodeShapes) {
  KS_REQUIRE_GPU();
  gpu();
  GemmRunner runner(nullptr);
  runner.set_tune_algorithms(true);
  runner.set_gemv_max_tokens(0);
  runner.set_wgmma_gemm(false);
  std::mt19937 rng(46);
  struct S {
    int t, n, k;
  };
  for (const S& sh : {S{128, 1024, 3072}, S{200, 1000, 2048}, S{64, 1024, 4096}}) {
    SCOPED_TRACE(testing::Message() << "t " << sh.t << " n " << sh.n << " k " << sh.k);
    Bf16Data x = random_bf16(Shape{sh.t, sh.k}, rng);
    Bf16Data w = random_bf16(Shape{sh.n, sh.k}, rng);
    Tensor x_d = gpu().upload(x.host, DType::kBF16);
    Tensor w_d = gpu().upload(w.host, DType::kBF16);
    const std::vector<double> want = matmul_ref(x, w, sh.t, sh.n, sh.k);
    // The call that times the candidates, then the chosen one again, each on fresh output.
    for (const char* call : {"timed algorithm", "the chosen algorithm"}) {
      Tensor out = poisoned(DType::kBF16, Shape{sh.t, sh.n});
      gpu().synchronize();
      runner.run(x_d.data(), w_d.data(), nullptr, out.data(), CUDA_R_16BF, sh.t, sh.n, sh.k);
      ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
      expect_close(fetch(out), want, call);
    }
  }
  EXPECT_EQ(runner.num_tuned(), 3u);
}

}  // namespace
}  // namespace kestrel
