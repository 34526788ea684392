// GEMMs through cuBLASLt: out[T, N] = x[T, K] * w[N, K]^T (+ bias[N]), bf16 inputs, fp32
// accumulation, bf16 or fp32 output.
//
// The first call for a shape (T, N, K, output type, bias, pointer alignment) creates the
// cuBLASLt descriptors and asks the heuristic for its best algorithm; later calls reuse
// them. Not thread-safe: one GemmRunner per stream (the backend owns one).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <tuple>

namespace kestrel {

class GemmRunner {
 public:
  // Allocates the cuBLASLt handle and a workspace on the current device.
  explicit GemmRunner(cudaStream_t stream);
  ~GemmRunner();
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;

  // x [t, k] bf16, w [n, k] bf16, out [t, n] of `out_type` (CUDA_R_16BF or CUDA_R_32F), all
  // device pointers, row-major. bias [n] bf16 (added in the epilogue, in fp32 before the
  // rounding) only with a bf16 out; otherwise null. Enqueues on the stream.
  // Throws kestrel::Error when cuBLASLt has no algorithm for the shape.
  void run(const void* x, const void* w, const void* bias, void* out, cudaDataType_t out_type,
           int64_t t, int64_t n, int64_t k);

  // Number of distinct shapes planned so far (tests check that plans are reused).
  size_t num_plans() const { return plans_.size(); }

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  // t, n, k, out_type, bias, alignment (bytes) of the four pointers.
  using Key = std::tuple<int64_t, int64_t, int64_t, int, bool, int>;

  Plan& plan_for(const Key& key);

  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan> plans_;
};

}  // namespace kestrel
