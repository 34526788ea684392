// RMSNorm, alone and fused with the residual add. The sum of squares is accumulated in
// double so the reference does not depend on the hidden size's rounding.
#include <cmath>

#include "backend/cpu/cpu_check.h"
#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

namespace kestrel::cpu {
namespace {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]; out may alias x.
inline void rms_norm_row(const float* x, const float* w, float eps, int64_t H, float* out) {
  double sum = 0.0;
  for (int64_t i = 0; i < H; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(H) + eps));
  for (int64_t i = 0; i < H; ++i) out[i] = x[i] * inv * w[i];
}

void check_norm_args(const char* op, const Tensor& x, const Tensor& w, float eps) {
  check_tensor(x, op, "x", DType::kF32, 2);
  check_tensor(w, op, "w", DType::kF32, 1);
  check_dim(w, op, "w", 0, x.dim(1), "hidden");
  KS_CHECK(eps >= 0.0f && std::isfinite(eps), "{}: eps must be finite and >= 0, got {}", op, eps);
}

}  // namespace

void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out, int num_threads) {
  const char* op = "rms_norm";
  check_norm_args(op, x, w, eps);
  check_tensor(out, op, "out", DType::kF32, 2);
  KS_CHECK(out.shape() == x.shape(), "{}: out {} must have x's shape {}", op, out.shape().str(),
           x.shape().str());
  const int64_t T = x.dim(0), H = x.dim(1);
  const float* in = x.data_as<float>();
  const float* weight = w.data_as<float>();
  float* o = out.data_as<float>();
#pragma omp parallel for num_threads(team_size(T* H * 2, num_threads)) schedule(static)
  for (int64_t t = 0; t < T; ++t) rms_norm_row(in + t * H, weight, eps, H, o + t * H);
}

void add_rms_norm(Tensor& x, Tensor& residual, const Tensor& w, float eps, int num_threads) {
  const char* op = "add_rms_norm";
  check_norm_args(op, x, w, eps);
  check_tensor(residual, op, "residual", DType::kF32, 2);
  KS_CHECK(residual.shape() == x.shape(), "{}: residual {} must have x's shape {}", op,
           residual.shape().str(), x.shape().str());
  const int64_t T = x.dim(0), H = x.dim(1);
  float* xs = x.data_as<float>();
  float* res = residual.data_as<float>();
  const float* weight = w.data_as<float>();
#pragma omp parallel for num_threads(team_size(T* H * 2, num_threads)) schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    float* xr = xs + t * H;
    float* rr = res + t * H;
    for (int64_t i = 0; i < H; ++i) rr[i] += xr[i];
    rms_norm_row(rr, weight, eps, H, xr);
  }
}

}  // namespace kestrel::cpu
