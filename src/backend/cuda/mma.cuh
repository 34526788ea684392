// Warp-level tensor-core helpers shared by the small-batch products (gemv.cu, gemv_fused.cu)
// and the tensor-core attention kernels (attention_decode_mma.cu, attention_prefill.cu).
// Included by .cu files only.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace kestrel::kernels {

// c += A B for one m16n8k16 tile: A (16 x 16 bf16, row-major fragment a0..a3), B (16 x 8
// bf16, column-major fragment b0, b1), fp32 accumulators c. Steps with T <= 8 token rows
// pass a1 = a3 = 0 (rows 8..15 of A).
__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
               "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The same with f16 A and B (exact for e4m3 values: attention_decode_mma.cu).
__device__ __forceinline__ void mma_f16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                        uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
               "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Four 8 x 8 matrices of 16-bit elements from shared memory (row addresses from lanes 0-7,
// 8-15, 16-23, 24-31 for matrices 0..3); lane t gets row t / 4, columns 2 (t % 4) and the next.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// The same, transposed (row addresses from
// lanes 0-7, 8-15, 16-23, 24-31 for matrices 0..3).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// One output element: fp32 as is, bf16 rounded to nearest.
__device__ __forceinline__ void store_out(float v, float* p) { *p = v; }
__device__ __forceinline__ void store_out(float v, __nv_bfloat16* p) { *p = __float2bfloat16(v); }

}  // namespace kestrel::kernels
