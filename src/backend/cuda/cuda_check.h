// Checking the results of CUDA runtime calls, kernel launches and cuBLASLt calls.
//
// Every such call in the CUDA backend goes through one of these macros, so a failure names
// the call (its source text), the file and the line. Failures throw kestrel::Error: an
// out-of-memory or a bad launch configuration must reach the user as a message, not a crash.
// After a device fault (illegal address) the CUDA context is unusable; the message says so
// and the process should stop.
//
// Usable from .cu (nvcc) and .cc (host compiler) files; includes no fmt or spdlog header.
#pragma once

#include <cuda_runtime_api.h>

namespace kestrel {

[[noreturn]] void cuda_fail(cudaError_t error, const char* op, const char* file, int line);
// `status` is a cublasStatus_t; int so that this header needs no cuBLAS include.
[[noreturn]] void cublas_fail(int status, const char* op, const char* file, int line);

// A driver API function found through the runtime (no link against libcuda): Fn is its
// PFN_..._vNNNNN type from <cudaTypedefs.h>, `version` that NNNNN. Throws where the driver
// lacks it.
void* driver_entry_point(const char* symbol, int version);
template <typename Fn>
Fn driver_function(const char* symbol, int version) {
  return reinterpret_cast<Fn>(driver_entry_point(symbol, version));
}

}  // namespace kestrel

#define KS_CUDA_CHECK(expr)                                                   \
  do {                                                                        \
    cudaError_t ks_err_ = (expr);                                             \
    if (ks_err_ != cudaSuccess) ::kestrel::cuda_fail(ks_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// After a <<<...>>> launch: reports launch-configuration errors (and earlier asynchronous
// faults) with the kernel's name.
#define KS_CUDA_CHECK_LAUNCH(kernel_name)                                     \
  do {                                                                        \
    cudaError_t ks_err_ = cudaGetLastError();                                 \
    if (ks_err_ != cudaSuccess)                                               \
      ::kestrel::cuda_fail(ks_err_, "launch of " kernel_name, __FILE__, __LINE__); \
  } while (0)

#define KS_CUBLAS_CHECK(expr)                                                 \
  do {                                                                        \
    auto ks_st_ = (expr);                                                     \
    if (static_cast<int>(ks_st_) != 0)                                        \
      ::kestrel::cublas_fail(static_cast<int>(ks_st_), #expr, __FILE__, __LINE__); \
  } while (0)
