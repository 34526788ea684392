// Host side of the tensor memory accelerator (tma.cuh): tensor maps (CUtensorMap) describing
// bf16 tensors in global memory that kernels copy from in boxes, with the 128-byte swizzle
// the wgmma shared-memory layout uses (wgmma.cuh). A map is passed to a kernel by value
// (`const __grid_constant__ CUtensorMap`), so launches that carry one are graph-capturable.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace kestrel::kernels {

// A bf16 tensor of `rank` (2..5) dims at ptr (16-byte aligned): dims[0] contiguous elements,
// byte_strides[i - 1] between consecutive indices of dim i (multiples of 16), read in boxes
// of box[i] elements per dim, box[0] = 64 (one 128-byte swizzle span). Reads outside the
// dims fill with zeros. Throws (KS_CUDA_CHECK) where the driver rejects the description.
CUtensorMap bf16_tensor_map(const void* ptr, int rank, const uint64_t* dims,
                            const uint64_t* byte_strides, const uint32_t* box);

// A row-major bf16 matrix [rows, cols] (cols a multiple of 8) read in boxes of box_rows x 64
// columns (one 128-byte swizzle span); zeros outside. The GEMMs' operand tiles.
CUtensorMap bf16_matrix_map(const void* ptr, int64_t rows, int64_t cols, int box_rows);

}  // namespace kestrel::kernels
