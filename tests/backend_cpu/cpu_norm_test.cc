// rms_norm and add_rms_norm against a double-precision reference.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "cpu_test_util.h"

namespace kestrel {
namespace {

using test::expect_close;
using test::random_f32;

std::vector<double> reference_rms_norm(const float* x, const float* w, int64_t T, int64_t H,
                                       double eps) {
  std::vector<double> out(T * H);
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0.0;
    for (int64_t i = 0; i < H; ++i) ss += double(x[t * H + i]) * x[t * H + i];
    const double r = 1.0 / std::sqrt(ss / H + eps);
    for (int64_t i = 0; i < H; ++i) out[t * H + i] = x[t * H + i] * r * w[i];
  }
  return out;
}

TEST(CpuNorm, RmsNormMatchesReference) {
  std::mt19937 rng(11);
  CpuBackend be(2);
  for (int64_t T : {1, 7, 33}) {
    for (int64_t H : {3, 64, 1000}) {
      Tensor x = random_f32({T, H}, rng, -3.0f, 3.0f);
      Tensor w = random_f32({H}, rng, 0.5f, 1.5f);
      Tensor out = be.empty(DType::kF32, {T, H});
      be.rms_norm(x, w, 1e-6f, out);
      expect_close(out.data_as<float>(),
                   reference_rms_norm(x.data_as<float>(), w.data_as<float>(), T, H, 1e-6f), 2e-6,
                   "rms_norm");
    }
  }
}

TEST(CpuNorm, EpsMattersForSmallRows) {
  CpuBackend be(1);
  // x = [3e-3, 4e-3]: mean square 12.5e-6; with eps 1e-5 the scale is 1/sqrt(22.5e-6).
  Tensor x = Tensor::host(DType::kF32, {1, 2});
  x.data_as<float>()[0] = 3e-3f;
  x.data_as<float>()[1] = 4e-3f;
  Tensor w = Tensor::host(DType::kF32, {2});
  w.data_as<float>()[0] = 1.0f;
  w.data_as<float>()[1] = 2.0f;
  Tensor out = be.empty(DType::kF32, {1, 2});
  be.rms_norm(x, w, 1e-5f, out);
  const double s = 1.0 / std::sqrt(22.5e-6);
  EXPECT_NEAR(out.data_as<float>()[0], 3e-3 * s, 1e-6);
  EXPECT_NEAR(out.data_as<float>()[1], 2 * 4e-3 * s, 1e-6);
}

TEST(CpuNorm, AddRmsNormUpdatesResidualAndOutput) {
  std::mt19937 rng(12);
  CpuBackend be(2);
  for (int64_t T : {1, 7, 33}) {
    const int64_t H = 129;
    Tensor x = random_f32({T, H}, rng);
    Tensor res = random_f32({T, H}, rng);
    Tensor w = random_f32({H}, rng, 0.5f, 1.5f);
    std::vector<float> sum(T * H);
    std::vector<double> sum_d(T * H);
    for (int64_t i = 0; i < T * H; ++i) {
      sum[i] = x.data_as<float>()[i] + res.data_as<float>()[i];
      sum_d[i] = double(x.data_as<float>()[i]) + res.data_as<float>()[i];
    }
    be.add_rms_norm(x, res, w, 1e-6f);
    expect_close(res.data_as<float>(), sum_d, 1e-7, "residual");
    expect_close(x.data_as<float>(), reference_rms_norm(sum.data(), w.data_as<float>(), T, H, 1e-6),
                 2e-6, "normed");
  }
}

TEST(CpuNorm, RejectsMismatchedShapes) {
  std::mt19937 rng(13);
  CpuBackend be(1);
  Tensor x = random_f32({2, 8}, rng);
  Tensor w = random_f32({7}, rng);
  Tensor out = be.empty(DType::kF32, {2, 8});
  EXPECT_THROW(be.rms_norm(x, w, 1e-6f, out), Error);
  Tensor w8 = random_f32({8}, rng);
  Tensor res = random_f32({3, 8}, rng);
  EXPECT_THROW(be.add_rms_norm(x, res, w8, 1e-6f), Error);
  Tensor bf = Tensor::host(DType::kBF16, {2, 8});
  EXPECT_THROW(be.rms_norm(bf, w8, 1e-6f, out), Error);
}

}  // namespace
}  // namespace kestrel
