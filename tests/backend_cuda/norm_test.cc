// rms_norm and add_rms_norm against a double-precision reference on the same bf16 inputs.
#include <gtest/gtest.h>

#include <cmath>

#include "cuda_test_util.h"

namespace kestrel {
namespace {

using namespace cuda_test;

constexpr float kEps = 1e-6f;

// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w.
std::vector<double> rms_norm_ref(const std::vector<double>& x, const std::vector<double>& w,
                                 int rows, int h) {
  std::vector<double> out(x.size());
  for (int t = 0; t < rows; ++t) {
    double ss = 0;
    for (int i = 0; i < h; ++i) ss += x[size_t(t) * h + i] * x[size_t(t) * h + i];
    const double inv = 1.0 / std::sqrt(ss / h + kEps);
    for (int i = 0; i < h; ++i) out[size_t(t) * h + i] = x[size_t(t) * h + i] * inv * w[i];
  }
  return out;
}

// Hidden sizes: 16-byte vectors (1024, 4096), 8-byte (996), 4-byte (1022) and scalar (1023).
const int kHidden[] = {64, 996, 1022, 1023, 1024, 4096};

TEST(CudaRmsNorm, MatchesReference) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(11);
  for (int rows : token_counts()) {
    for (int h : kHidden) {
      SCOPED_TRACE(testing::Message() << "rows " << rows << " hidden " << h);
      Bf16Data x = random_bf16(Shape{rows, h}, rng, -3.0f, 3.0f);
      Bf16Data w = random_bf16(Shape{h}, rng, 0.5f, 1.5f);
      Tensor out = poisoned(DType::kBF16, Shape{rows, h});
      gpu().rms_norm(gpu().upload(x.host, DType::kBF16), gpu().upload(w.host, DType::kBF16), kEps,
                     out);
      expect_close(fetch(out), rms_norm_ref(x.values, w.values, rows, h), "rms_norm");
    }
  }
}

TEST(CudaAddRmsNorm, UpdatesResidualAndNormalises) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(12);
  for (int rows : token_counts()) {
    for (int h : kHidden) {
      SCOPED_TRACE(testing::Message() << "rows " << rows << " hidden " << h);
      Bf16Data x = random_bf16(Shape{rows, h}, rng, -2.0f, 2.0f);
      Bf16Data r = random_bf16(Shape{rows, h}, rng, -4.0f, 4.0f);
      Bf16Data w = random_bf16(Shape{h}, rng, 0.5f, 1.5f);
      Tensor xd = gpu().upload(x.host, DType::kBF16);
      Tensor rd = gpu().upload(r.host, DType::kBF16);
      gpu().add_rms_norm(xd, rd, gpu().upload(w.host, DType::kBF16), kEps);
      std::vector<double> sum(x.values.size());
      for (size_t i = 0; i < sum.size(); ++i) sum[i] = x.values[i] + r.values[i];
      expect_close(fetch(rd), sum, "residual");
      expect_close(fetch(xd), rms_norm_ref(sum, w.values, rows, h), "normalised x");
    }
  }
}

}  // namespace
}  // namespace kestrel
