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

}  // namespace kestrel::cuda_ops
