// Row gather: out[i] = table[rows[i] - row_offset]. Serves the embedding lookup (table =
// embedding matrix [V, H], rows = token ids, some of them pending tokens fed back from the
// last sampling; a tensor-parallel rank's table holds the vocab rows from row_offset on)
// and gather_rows (picking the rows to sample).
//
// Memory-bound: each output row is one read and one write of row_bytes. Launch: one block
// per output row (grid.x = num_rows), threads stride over the row in the widest vector
// (16, 8, 4, 2 or 1 bytes) that the row size and both base pointers allow.
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/kernels.h"

namespace kestrel::kernels {
namespace {

template <typename V>
__global__ void gather_rows_kernel(const V* __restrict__ table, int64_t num_table_rows,
                                   int64_t row_vecs, const int32_t* __restrict__ rows,
                                   const int32_t* __restrict__ pending, int64_t row_offset,
                                   V* __restrict__ out) {
  pdl_wait();  // launch.cuh: before touching what earlier kernels write
  pdl_trigger();
  const int64_t i = blockIdx.x;
  int64_t r = rows[i];
  if (r < 0 && pending != nullptr) r = pending[-1 - r];
  // After the pending id is resolved: a fed-back token is a global id like any other.
  r -= row_offset;
  V* dst = out + i * row_vecs;
  if (r < 0 || r >= num_table_rows) {
    for (int64_t j = threadIdx.x; j < row_vecs; j += blockDim.x) dst[j] = V{};
    return;
  }
  const V* src = table + r * row_vecs;
  for (int64_t j = threadIdx.x; j < row_vecs; j += blockDim.x) dst[j] = src[j];
}

template <typename V>
void launch(const void* table, int64_t num_table_rows, size_t row_bytes, const int32_t* rows,
            const int32_t* pending, int64_t row_offset, int64_t num_rows, void* out,
            cudaStream_t stream) {
  const int64_t row_vecs = static_cast<int64_t>(row_bytes / sizeof(V));
  int threads = static_cast<int>(row_vecs < 256 ? (row_vecs + 31) / 32 * 32 : 256);
  if (threads == 0) threads = 32;
  launch_pdl("gather_rows_kernel", gather_rows_kernel<V>, static_cast<unsigned>(num_rows), threads,
             0, stream, static_cast<const V*>(table), num_table_rows, row_vecs, rows, pending,
             row_offset, static_cast<V*>(out));
  KS_CUDA_CHECK_LAUNCH("gather_rows_kernel");
}

}  // namespace

void gather_rows(const void* table, int64_t num_table_rows, size_t row_bytes, const int32_t* rows,
                 int64_t num_rows, void* out, cudaStream_t stream, const int32_t* pending,
                 int64_t row_offset) {
  if (num_rows == 0 || row_bytes == 0) return;
  const uintptr_t align = reinterpret_cast<uintptr_t>(table) | reinterpret_cast<uintptr_t>(out) |
                          static_cast<uintptr_t>(row_bytes);
  const auto go = [&](auto vec) {
    launch<decltype(vec)>(table, num_table_rows, row_bytes, rows, pending, row_offset, num_rows,
                          out, stream);
  };
  if (align % 16 == 0) return go(uint4{});
  if (align % 8 == 0) return go(uint2{});
  if (align % 4 == 0) return go(uint32_t{});
  if (align % 2 == 0) return go(uint16_t{});
  go(uint8_t{});
}

}  // namespace kestrel::kernels
