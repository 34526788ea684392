#include "backend/cuda/tma_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_check.h"

namespace kestrel::kernels {
namespace {

// The driver's encoder, found once through the runtime (no link against libcuda).
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const auto fn =
      driver_function<PFN_cuTensorMapEncodeTiled_v12000>("cuTensorMapEncodeTiled", 12000);
  return fn;
}

}  // namespace

CUtensorMap bf16_tensor_map(const void* ptr, int rank, const uint64_t* dims,
                            const uint64_t* byte_strides, const uint32_t* box) {
  KS_CUDA_CHECK(rank >= 2 && rank <= 5 && box[0] == 64 ? cudaSuccess : cudaErrorInvalidValue);
  CUtensorMap map;
  cuuint64_t d[5], s[4];
  cuuint32_t b[5], element_strides[5];
  for (int i = 0; i < rank; ++i) {
    d[i] = dims[i];
    b[i] = box[i];
    element_strides[i] = 1;
    if (i > 0) s[i - 1] = byte_strides[i - 1];
  }
  const CUresult r = encode_tiled()(
      &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, static_cast<cuuint32_t>(rank),
      const_cast<void*>(ptr), d, s, b, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  KS_CUDA_CHECK(r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue);
  return map;
}

CUtensorMap bf16_matrix_map(const void* ptr, int64_t rows, int64_t cols, int box_rows) {
  const uint64_t dims[2] = {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)};
  const uint64_t strides[1] = {static_cast<uint64_t>(cols) * 2};
  const uint32_t box[2] = {64, static_cast<uint32_t>(box_rows)};
  return bf16_tensor_map(ptr, 2, dims, strides, box);
}

}  // namespace kestrel::kernels
