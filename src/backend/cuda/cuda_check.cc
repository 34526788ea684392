#include "backend/cuda/cuda_check.h"

#include <cublasLt.h>

#include "core/error.h"

namespace kestrel {

void cuda_fail(cudaError_t error, const char* op, const char* file, int line) {
  // A failed runtime call also leaves its error as the thread's "last error"; clear it, or
  // the next KS_CUDA_CHECK_LAUNCH would report this failure again against an innocent kernel.
  cudaGetLastError();
  const bool sticky = error == cudaErrorIllegalAddress || error == cudaErrorLaunchFailure ||
                      error == cudaErrorIllegalInstruction || error == cudaErrorMisalignedAddress ||
                      error == cudaErrorHardwareStackError || error == cudaErrorAssert;
  throw_error("CUDA error in {} at {}:{}: {} ({}){}", op, file, line, cudaGetErrorString(error),
              cudaGetErrorName(error),
              sticky ? "; the CUDA context is now unusable, restart the process" : "");
}

void cublas_fail(int status, const char* op, const char* file, int line) {
  auto st = static_cast<cublasStatus_t>(status);
  throw_error("cuBLAS error in {} at {}:{}: {} ({})", op, file, line, cublasLtGetStatusString(st),
              cublasLtGetStatusName(st));
}

void* driver_entry_point(const char* symbol, int version) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  KS_CUDA_CHECK(cudaGetDriverEntryPointByVersion(symbol, &p, version, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || p == nullptr) {
    throw_error("the CUDA driver has no {} (version {}): update the driver", symbol, version);
  }
  return p;
}

}  // namespace kestrel
