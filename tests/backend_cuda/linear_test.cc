// linear (cuBLASLt) against a double-precision reference, and the reuse of GEMM plans.
#include <gtest/gtest.h>

#include "backend/cuda/gemm/gemm.h"
#include "cuda_test_util.h"

namespace kestrel {
namespace {

using namespace cuda_test;

struct GemmShape {
  int k, n;
};

// Qwen3-0.6B's qkv (1024 -> 4096) and down (3072 -> 1024) projections, and odd sizes.
const GemmShape kShapes[] = {{1024, 4096}, {3072, 1024}, {1000, 200}, {77, 51}};

TEST(CudaLinear, Bf16OutputMatchesReference) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(31);
  for (const GemmShape& s : kShapes) {
    Bf16Data w = random_bf16(Shape{s.n, s.k}, rng);
    Bf16Data bias = random_bf16(Shape{s.n}, rng);
    Tensor w_d = gpu().upload(w.host, DType::kBF16);
    Tensor bias_d = gpu().upload(bias.host, DType::kBF16);
    for (int t : token_counts()) {
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE(testing::Message() << "T " << t << " K " << s.k << " N " << s.n << " bias "
                                        << with_bias);
        Bf16Data x = random_bf16(Shape{t, s.k}, rng);
        Tensor out = poisoned(DType::kBF16, Shape{t, s.n});
        gpu().linear(gpu().upload(x.host, DType::kBF16), w_d, with_bias ? bias_d : Tensor(), out);
        expect_close(fetch(out), linear_ref(x, w, with_bias ? &bias : nullptr, t, s.n, s.k),
                     "linear bf16");
      }
    }
  }
}

TEST(CudaLinear, F32LogitsMatchReference) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(32);
  const int k = 1024, n = 5003;  // an odd vocabulary
  Bf16Data w = random_bf16(Shape{n, k}, rng);
  Bf16Data bias = random_bf16(Shape{n}, rng);
  Tensor w_d = gpu().upload(w.host, DType::kBF16);
  for (int t : {1, 7, 33}) {
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE(testing::Message() << "T " << t << " bias " << with_bias);
      Bf16Data x = random_bf16(Shape{t, k}, rng);
      Tensor out = poisoned(DType::kF32, Shape{t, n});
      gpu().linear(gpu().upload(x.host, DType::kBF16), w_d,
                   with_bias ? gpu().upload(bias.host, DType::kBF16) : Tensor(), out);
      // fp32 output of fp32 accumulation: far tighter than bf16.
      expect_close(fetch(out), linear_ref(x, w, with_bias ? &bias : nullptr, t, n, k),
                   "linear f32", 1e-4, 1e-3, 1e-4);
    }
  }
}

TEST(CudaGemmRunner, PlansOncePerShape) {
  KS_REQUIRE_GPU();
  gpu();  // makes the device current
  cudaStream_t stream = nullptr;  // the legacy default stream
  GemmRunner runner(stream);
  runner.set_gemv_max_tokens(0);  // plans belong to the cuBLASLt path (t = 8 would take gemv)
  std::mt19937 rng(33);
  Bf16Data x = random_bf16(Shape{8, 64}, rng);
  Bf16Data w = random_bf16(Shape{32, 64}, rng);
  Tensor xd = gpu().upload(x.host, DType::kBF16);
  Tensor wd = gpu().upload(w.host, DType::kBF16);
  Tensor out = poisoned(DType::kBF16, Shape{8, 32});
  gpu().synchronize();
  runner.run(xd.data(), wd.data(), nullptr, out.data(), CUDA_R_16BF, 8, 32, 64);
  runner.run(xd.data(), wd.data(), nullptr, out.data(), CUDA_R_16BF, 8, 32, 64);
  EXPECT_EQ(runner.num_plans(), 1u);
  runner.run(xd.data(), wd.data(), nullptr, out.data(), CUDA_R_16BF, 5, 32, 64);
  EXPECT_EQ(runner.num_plans(), 2u);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  expect_close(fetch(out), linear_ref(x, w, nullptr, 8, 32, 64), "runner output");
}

// Prompt-sized rows take the algorithm of their power-of-two bucket (gemm.h): the product
// must still be exact for the rows that exist, with and without a bias.
TEST(CudaGemmRunner, PromptRowsUseTheirBucketsAlgorithm) {
  KS_REQUIRE_GPU();
  gpu();
  GemmRunner runner(nullptr);
  EXPECT_EQ(runner.bucket_rows(200), 200);
  EXPECT_EQ(runner.bucket_rows(256), 256);
  EXPECT_EQ(runner.bucket_rows(257), 512);
  EXPECT_EQ(runner.bucket_rows(500), 512);
  EXPECT_EQ(runner.bucket_rows(3000), 4096);
  std::mt19937 rng(34);
  const int k = 512, n = 192;
  Bf16Data w = random_bf16(Shape{n, k}, rng);
  Bf16Data bias = random_bf16(Shape{n}, rng);
  Tensor wd = gpu().upload(w.host, DType::kBF16);
  Tensor bd = gpu().upload(bias.host, DType::kBF16);
  for (int t : {257, 500, 777, 3000}) {
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE(testing::Message() << "T " << t << " bias " << with_bias);
      Bf16Data x = random_bf16(Shape{t, k}, rng);
      Tensor xd = gpu().upload(x.host, DType::kBF16);
      Tensor out = poisoned(DType::kBF16, Shape{t, n});
      gpu().synchronize();
      runner.run(xd.data(), wd.data(), with_bias ? bd.data() : nullptr, out.data(), CUDA_R_16BF,
                 t, n, k);
      ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
      expect_close(fetch(out), linear_ref(x, w, with_bias ? &bias : nullptr, t, n, k),
                   "bucketed linear");
    }
  }
}

}  // namespace
}  // namespace kestrel
