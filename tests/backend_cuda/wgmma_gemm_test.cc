// The decode-step wgmma GEMM (wgmma_gemm.h) against a double-precision reference written
// here: every token tile and K split over odd T, NaN in the rows of x and out past T, the
// same bits on every run, and GemmRunner's dispatch to it. Runs on compute capability 9.0
// only (the kernel is built for sm_90a alone).
#include <gtest/gtest.h>

#include <cstring>

#include "backend/cuda/gemm/gemm.h"
#include "backend/cuda/gemm/wgmma_gemm.h"
#include "backend/cuda/launch.h"
#include "cuda_test_util.h"

namespace kestrel {
namespace {

using namespace cuda_test;

#define KS_REQUIRE_SM90()                                                          \
  KS_REQUIRE_GPU();                                                                \
  gpu();                                                                           \
  if (kernels::compute_capability() != 90) GTEST_SKIP() << "needs compute capability 9.0"

// bf16 output: one rounding of an fp32 sum, so 2^-8 of each element plus a little for the
// fp32 accumulation.
void expect_bf16_product(const std::vector<double>& got, const std::vector<double>& ref,
                         const std::string& what) {
  expect_close(got, ref, what, 4e-3, 8e-3, 1e-3);
}

TEST(WgmmaGemm, EveryTileAndSplitMatchesReference) {
  KS_REQUIRE_SM90();
  std::mt19937 rng(71);
  struct S {
    int n, k;
  };
  const S shapes[] = {{128, 64}, {256, 512}, {384, 1024}, {1024, 2048}};
  const int ts[] = {1, 7, 17, 63, 64, 65, 100, 128, 129, 200, 256};
  for (const S& s : shapes) {
    Bf16Data w = random_bf16(Shape{s.n, s.k}, rng);
    Tensor w_d = gpu().upload(w.host, DType::kBF16);
    for (int t : ts) {
      Bf16Data x = random_bf16(Shape{t, s.k}, rng);
      Tensor x_d = upload_x_with_nan_tail(x, t, s.k, 8);
      const std::vector<double> ref = linear_ref(x, w, nullptr, t, s.n, s.k);
      // rows:tile/split: the 128-row CTAs, then the 64-row ones with the deep ring.
      for (const auto& [rows, tile] :
           std::vector<std::pair<int, int>>{{128, 64}, {128, 128}, {64, 32}, {64, 64}, {64, 128}}) {
        for (int split = 1; split <= kernels::kWgmmaGemmMaxSplit; split *= 2) {
          if ((s.k / kernels::kWgmmaGemmStepK) % split != 0) continue;
          SCOPED_TRACE(testing::Message() << "T " << t << " N " << s.n << " K " << s.k << " rows "
                                          << rows << " tile " << tile << " split " << split);
          Tensor out = poisoned(DType::kBF16, Shape{t + 3, s.n});  // 3 rows that stay NaN
          gpu().synchronize();
          ASSERT_TRUE(
              kernels::wgmma_gemm_supported(t, s.n, s.k, x_d.data(), w_d.data(), out.data()));
          kernels::wgmma_gemm(x_d.data(), w_d.data(), out.data(), t, s.n, s.k, 132, nullptr,
                              {tile, split, rows});
          ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
          std::vector<double> got = fetch(out);
          for (size_t i = size_t(t) * s.n; i < got.size(); ++i) {
            ASSERT_TRUE(std::isnan(got[i])) << "wrote past row T at element " << i;
          }
          got.resize(size_t(t) * s.n);
          expect_bf16_product(got, ref, "wgmma gemm");
        }
      }
    }
  }
}

// The split-K sum has a fixed order: the same call gives the same bits every time, and the
// default plan of each Qwen3-0.6B decode shape matches the reference.
TEST(WgmmaGemm, ModelShapesAreExactAndRepeatable) {
  KS_REQUIRE_SM90();
  std::mt19937 rng(72);
  struct S {
    int k, n;
  };
  const S shapes[] = {{1024, 4096}, {2048, 1024}, {1024, 6144}, {3072, 1024}};
  for (const S& s : shapes) {
    Bf16Data w = random_bf16(Shape{s.n, s.k}, rng);
    Tensor w_d = gpu().upload(w.host, DType::kBF16);
    for (int t : {24, 128, 256}) {
      for (const kernels::WgmmaGemmPlan plan : {kernels::wgmma_gemm_plan(t, s.n, s.k, 132),
                                                kernels::wgmma_gemm_deep_plan(t, s.n, s.k, 132)}) {
        SCOPED_TRACE(testing::Message()
                     << "T " << t << " K " << s.k << " N " << s.n << " rows " << plan.rows
                     << " tile " << plan.tile_tokens << " split " << plan.split);
        Bf16Data x = random_bf16(Shape{t, s.k}, rng);
        Tensor x_d = gpu().upload(x.host, DType::kBF16);
        Tensor first = poisoned(DType::kBF16, Shape{t, s.n});
        Tensor again = poisoned(DType::kBF16, Shape{t, s.n});
        gpu().synchronize();
        // rows alone: the rest from that shape's default plan, which is `plan`.
        const kernels::WgmmaGemmPlan by_rows{0, 0, plan.rows};
        kernels::wgmma_gemm(x_d.data(), w_d.data(), first.data(), t, s.n, s.k, 132, nullptr,
                            by_rows);
        for (int rep = 0; rep < 3; ++rep) {
          kernels::wgmma_gemm(x_d.data(), w_d.data(), again.data(), t, s.n, s.k, 132, nullptr,
                              by_rows);
          ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
          ASSERT_EQ(fetch(first), fetch(again)) << "run " << rep << " differs";
        }
        expect_bf16_product(fetch(first), linear_ref(x, w, nullptr, t, s.n, s.k), "model shape");
      }
    }
  }
}

TEST(WgmmaGemm, PlanSplitsKToFillTheGpu) {
  // T 256 x N 1024 is 16 tiles of 128 x 128: split 8 gives 128 CTAs.
  EXPECT_EQ(kernels::wgmma_gemm_plan(256, 1024, 2048, 132).split, 8);
  EXPECT_EQ(kernels::wgmma_gemm_plan(256, 1024, 2048, 132).tile_tokens, 128);
  EXPECT_EQ(kernels::wgmma_gemm_plan(40, 1024, 2048, 132).tile_tokens, 64);
  // Enough tiles already: no split. Too little K: at least 2 stages per CTA.
  EXPECT_EQ(kernels::wgmma_gemm_plan(256, 32768, 1024, 132).split, 1);
  EXPECT_EQ(kernels::wgmma_gemm_plan(17, 128, 128, 132).split, 1);
  EXPECT_EQ(kernels::wgmma_gemm_plan(17, 128, 256, 132).split, 2);
  // A split always divides the K steps.
  EXPECT_EQ(kernels::wgmma_gemm_plan(64, 128, 64 * 6, 132).split, 2);
  EXPECT_EQ(kernels::wgmma_gemm_plan(64, 128, 64 * 5, 132).split, 1);
}

// The 64-row plan: the smallest token tile that holds T, K split in two or four while the
// CTAs stay within half the SMs (66 of 132), or at T <= 32 a whole wave where the K slices
// stay within 1,536-6,144, only where the split divides the K steps.
TEST(WgmmaGemm, DeepPlanKeepsToHalfTheSms) {
  auto plan = [](int64_t t, int64_t n, int64_t k) {
    const kernels::WgmmaGemmPlan p = kernels::wgmma_gemm_deep_plan(t, n, k, 132);
    EXPECT_EQ(p.rows, 64);
    return std::make_pair(p.tile_tokens, p.split);
  };
  EXPECT_EQ(plan(16, 1024, 2048), std::make_pair(32, 4));   // 16 tiles: 64 CTAs
  EXPECT_EQ(plan(33, 1024, 3072), std::make_pair(64, 4));
  EXPECT_EQ(plan(16, 4096, 1024), std::make_pair(32, 1));   // 64 tiles already
  EXPECT_EQ(plan(20, 2048, 2048), std::make_pair(32, 2));   // 32 tiles: 64 CTAs
  // Past 64 rows, 64-token tiles while they fit one wave (session 30's H100 sweep at T = 128).
  EXPECT_EQ(plan(100, 1024, 2048), std::make_pair(64, 2));   // 32 tiles: 64 CTAs
  EXPECT_EQ(plan(128, 4096, 1024), std::make_pair(64, 1));   // 128 tiles
  EXPECT_EQ(plan(128, 1024, 3072), std::make_pair(64, 2));
  EXPECT_EQ(plan(128, 6144, 1024), std::make_pair(128, 1));  // 192 tiles of 64: 96 of 128
  EXPECT_EQ(plan(256, 1024, 2048), std::make_pair(64, 1));   // 64 tiles
  EXPECT_EQ(plan(8, 64, 64 * 3), std::make_pair(32, 1));    // 3 K steps: no split divides
  EXPECT_EQ(plan(8, 64, 64 * 2), std::make_pair(32, 1));    // a split keeps >= 2 steps
  // At T <= 32, K slices of 1,536-6,144 split on up to a whole wave (132 CTAs).
  EXPECT_EQ(plan(16, 3072, 4096), std::make_pair(32, 2));   // 48 tiles: 96 CTAs
  EXPECT_EQ(plan(32, 4096, 6144), std::make_pair(32, 2));   // 64 tiles: 128 CTAs
  EXPECT_EQ(plan(16, 4096, 2048), std::make_pair(32, 1));   // slices of 1,024: too short
  EXPECT_EQ(plan(16, 4096, 12288), std::make_pair(32, 2));  // slices of 6,144
  EXPECT_EQ(plan(16, 4096, 16384), std::make_pair(32, 1));  // of 8,192: not measured
  EXPECT_EQ(plan(48, 3072, 4096), std::make_pair(64, 1));   // 33-64 rows: half the SMs
  EXPECT_EQ(plan(16, 1536, 4096), std::make_pair(32, 2));   // four ways: slices of 1,024
  // Preferred: at most 64 rows, within half the SMs, at most 256 KiB of K slice a CTA.
  EXPECT_TRUE(kernels::wgmma_gemm_deep_preferred(16, 4096, 1024, 132));
  EXPECT_TRUE(kernels::wgmma_gemm_deep_preferred(64, 1024, 3072, 132));
  EXPECT_FALSE(kernels::wgmma_gemm_deep_preferred(16, 6144, 1024, 132));  // 96 tiles
  EXPECT_FALSE(kernels::wgmma_gemm_deep_preferred(65, 1024, 2048, 132));
  EXPECT_FALSE(kernels::wgmma_gemm_deep_preferred(16, 4096, 2048, 132));  // 384 KB a CTA
  EXPECT_TRUE(kernels::wgmma_gemm_deep_preferred(64, 4096, 1024, 132));   // 256 KiB
  // Or split on up to a whole wave.
  EXPECT_TRUE(kernels::wgmma_gemm_deep_preferred(16, 3072, 4096, 132));
  EXPECT_TRUE(kernels::wgmma_gemm_deep_preferred(32, 4096, 6144, 132));
  EXPECT_TRUE(kernels::wgmma_gemm_deep_preferred(16, 4096, 4096, 132));
  EXPECT_TRUE(kernels::wgmma_gemm_deep_preferred(16, 1536, 4096, 132));
  EXPECT_TRUE(kernels::wgmma_gemm_deep_preferred(16, 4096, 12288, 132));
  EXPECT_FALSE(kernels::wgmma_gemm_deep_preferred(16, 4096, 16384, 132));
  EXPECT_FALSE(kernels::wgmma_gemm_deep_preferred(48, 3072, 4096, 132));
}

TEST(WgmmaGemm, SupportedShapes) {
  alignas(16) static const uint16_t buf[16] = {};
  const void* a = buf;
  const void* odd = buf + 1;
  EXPECT_TRUE(kernels::wgmma_gemm_supported(256, 1024, 2048, a, a, a));
  EXPECT_FALSE(kernels::wgmma_gemm_supported(257, 1024, 2048, a, a, a));
  EXPECT_FALSE(kernels::wgmma_gemm_supported(0, 1024, 2048, a, a, a));
  EXPECT_FALSE(kernels::wgmma_gemm_supported(16, 1000, 2048, a, a, a));
  EXPECT_FALSE(kernels::wgmma_gemm_supported(16, 1024, 1000, a, a, a));
  EXPECT_FALSE(kernels::wgmma_gemm_supported(16, 1024, 2048, odd, a, a));
  EXPECT_FALSE(kernels::wgmma_gemm_supported(16, 1024, 2048, a, a, odd));
}

// GemmRunner: bf16 products past the gemv threshold take the kernel (no cuBLASLt plan);
// bias, fp32 output and unsupported shapes go to cuBLASLt; switched off, everything does.
TEST(WgmmaGemm, RunnerDispatch) {
  KS_REQUIRE_SM90();
  std::mt19937 rng(73);
  GemmRunner runner(nullptr);
  runner.set_wgmma_gemm(true);
  ASSERT_TRUE(runner.wgmma_gemm());
  const int n = 256, k = 512, t = 40;
  Bf16Data w = random_bf16(Shape{n, k}, rng);
  Bf16Data x = random_bf16(Shape{t, k}, rng);
  Tensor w_d = gpu().upload(w.host, DType::kBF16);
  Tensor x_d = gpu().upload(x.host, DType::kBF16);
  const std::vector<double> ref = linear_ref(x, w, nullptr, t, n, k);
  Tensor out = poisoned(DType::kBF16, Shape{t, n});
  gpu().synchronize();
  runner.run(x_d.data(), w_d.data(), nullptr, out.data(), CUDA_R_16BF, t, n, k);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  EXPECT_EQ(runner.num_plans(), 0u);
  expect_bf16_product(fetch(out), ref, "runner, wgmma");

  Tensor f32 = poisoned(DType::kF32, Shape{t, n});
  gpu().synchronize();
  runner.run(x_d.data(), w_d.data(), nullptr, f32.data(), CUDA_R_32F, t, n, k);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  EXPECT_EQ(runner.num_plans(), 1u) << "fp32 output goes to cuBLASLt";
  expect_close(fetch(f32), ref, "runner, f32", 1e-4, 1e-3, 1e-4);

  runner.set_wgmma_gemm(false);
  Tensor off = poisoned(DType::kBF16, Shape{t, n});
  gpu().synchronize();
  runner.run(x_d.data(), w_d.data(), nullptr, off.data(), CUDA_R_16BF, t, n, k);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  EXPECT_EQ(runner.num_plans(), 2u) << "switched off: cuBLASLt";
  expect_bf16_product(fetch(off), ref, "runner, cuBLASLt");
}

}  // namespace
}  // namespace kestrel
