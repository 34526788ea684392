// Argument checks and pointer casts shared by the CudaBackend entry points (cuda_ops.cc,
// cuda_fused_ops.cc). Internal to src/backend/cuda.
#pragma once

#include <cstdint>

#include "backend/cuda/kernels.h"
#include "core/error.h"
#include "core/tensor.h"

namespace kestrel::cuda_ops {

using kernels::bf16;

inline void check_tensor(const char* op, const char* name, const Tensor& t, DType dtype, int ndim) {
  KS_CHECK(t.defined(), "{}: {} is not defined", op, name);
  KS_CHECK(t.device() == Device::kCuda, "{}: {} is not on the CUDA device", op, name);
  KS_CHECK(t.dtype() == dtype, "{}: {} must be {}, got {}", op, name, dtype_name(dtype),
           dtype_name(t.dtype()));
  KS_CHECK(t.ndim() == ndim, "{}: {} must have {} dims, got {}", op, name, ndim, t.shape().str());
}

inline void check_aligned(const char* op, const char* name, const Tensor& t, int bytes) {
  KS_CHECK(reinterpret_cast<uintptr_t>(t.data()) % bytes == 0,
           "{}: {} must be {}-byte aligned", op, name, bytes);
}

inline const bf16* bf(const Tensor& t) { return static_cast<const bf16*>(t.data()); }
inline bf16* bf_mut(const Tensor& t) { return static_cast<bf16*>(t.data()); }
inline const int32_t* i32(const Tensor& t) { return static_cast<const int32_t*>(t.data()); }

inline int to_int(int64_t v) { return static_cast<int>(v); }

struct Dims {
  int64_t t, n, k;
};

// Checks the operands of a product out[t, n] = x'[t, k] w[n, k]^T (+ bias[n]), where x holds
// x_cols_per_k * k columns (2 for [gate | up]); out is BF16, or F32 where f32_ok.
inline Dims check_product(const char* op, const Tensor& x, int64_t x_cols_per_k, const Tensor& w,
                          const Tensor& bias, const Tensor& out, bool f32_ok) {
  check_tensor(op, "x", x, DType::kBF16, 2);
  check_tensor(op, "w", w, DType::kBF16, 2);
  KS_CHECK(out.defined() && (out.dtype() == DType::kBF16 || (f32_ok && out.dtype() == DType::kF32)),
           "{}: out must be BF16{}", op, f32_ok ? " or F32" : "");
  check_tensor(op, "out", out, out.dtype(), 2);
  const Dims d{x.dim(0), w.dim(0), w.dim(1)};
  KS_CHECK(d.k > 0 && x.dim(1) == x_cols_per_k * d.k, "{}: x {} and w {} disagree (w is [N, K])",
           op, x.shape().str(), w.shape().str());
  KS_CHECK(out.dim(0) == d.t && out.dim(1) == d.n, "{}: out {} must be [{}, {}]", op,
           out.shape().str(), d.t, d.n);
  if (bias.defined()) {
    check_tensor(op, "bias", bias, DType::kBF16, 1);
    KS_CHECK(bias.dim(0) == d.n, "{}: bias {} must be [{}]", op, bias.shape().str(), d.n);
  }
  return d;
}

}  // namespace kestrel::cuda_ops
