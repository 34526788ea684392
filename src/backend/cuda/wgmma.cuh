// Hopper warpgroup matrix multiply (wgmma, sm_90a only): shared-memory matrix descriptors,
// the fences and waits, and the few shapes the kernels use. Included by sm_90a .cu files
// only (the *_sm90a.cu sources, compiled for that target alone; CMakeLists.txt).
//
// A wgmma is issued by a warpgroup (4 consecutive warps, the first a multiple of 4) and runs
// asynchronously: issue (wgmma_fence first, if registers it reads or accumulates into were
// written since), wgmma_commit, then wgmma_wait<N> before reading the accumulators, and
// wgmma_fence_operand on them so that the compiler does not move their uses above the wait.
//
// Shared-memory layout used throughout: 128-byte swizzle. A tile of R rows x 64 bf16 (one
// 128-byte line per row) is a "panel"; 16-byte chunk c of row r lives at
//   panel + 128 r + 16 (c ^ (r % 8)),
// and a tile wider than 64 is consecutive panels. Panels start at 1024-byte boundaries.
// - K-major operand (the reduction dimension along the row): rows are M or N; 8-row groups
//   1024 bytes apart (SBO); a k-step of 16 moves the start address by 32 bytes within the
//   line (the swizzle applies to absolute address bits, so this stays consistent).
// - MN-major operand (transposed B, e.g. V [keys][dims] for P V): rows are K; 8-row groups
//   1024 bytes apart (SBO), the next 64 columns of N one panel further (LBO); a k-step of
//   16 moves the start address by 16 rows.
#pragma once

#include <cstdint>

namespace kestrel::kernels::sm90 {

// Byte offset of 16-byte chunk `chunk` (0 .. D / 8) of row `row` in a swizzled tile of
// panels `panel_bytes` apart.
__device__ __forceinline__ uint32_t swizzled_chunk(int row, int chunk, uint32_t panel_bytes) {
  return (chunk >> 3) * panel_bytes + row * 128 + (((chunk & 7) ^ (row & 7)) << 4);
}

// A 128-byte-swizzle matrix descriptor at shared address `addr` with the given leading and
// stride byte offsets (PTX ISA, "Matrix Descriptor Format").
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(lbo >> 4) << 16) |
         (uint64_t(sbo >> 4) << 32) | (uint64_t(1) << 62);
}

// The descriptor of the address `bytes` (a multiple of 16) past desc's: its start-address
// field is (address & 0x3FFFF) >> 4, 14 bits, which a CTA's < 228 KB of shared memory never
// carries out of. One add instead of rebuilding the descriptor for every k-step.
__device__ __forceinline__ uint64_t smem_desc_advance(uint64_t desc, uint32_t bytes) {
  return desc + (bytes >> 4);
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most N committed groups of this warpgroup are in flight.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_fence_operand(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Orders this thread's earlier generic-proxy writes of shared memory (ordinary stores,
// cp.async) before later async-proxy reads (wgmma); a barrier must follow.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Accumulator operand lists of the shapes below: 16 (N = 32), 32 (N = 64), 64 (N = 128) or
// 128 (N = 256) fp32 per thread, asm operands %0 .. %15, %0 .. %31, %0 .. %63 or %0 .. %127.
#define KS_WGMMA_ACC16(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
    "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), \
    "+f"(d[14]), "+f"(d[15])
#define KS_WGMMA_ACC32(d) \
    KS_WGMMA_ACC16(d), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
    "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
    "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define KS_WGMMA_ACC64(d) \
    KS_WGMMA_ACC32(d), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), \
    "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), \
    "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), \
    "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), \
    "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define KS_WGMMA_REGS16 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define KS_WGMMA_REGS32 \
  KS_WGMMA_REGS16 ", " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define KS_WGMMA_REGS64 \
  KS_WGMMA_REGS32 ", " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"

#define KS_WGMMA_ACC128(d) \
    KS_WGMMA_ACC64(d), \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), \
    "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), \
    "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), \
    "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), \
    "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), \
    "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), \
    "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), \
    "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), \
    "+f"(d[127])
#define KS_WGMMA_REGS128 \
  KS_WGMMA_REGS64 ", " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

// d [64 x 256] = A [64 x 16] B [16 x 256] (+ d when scale_d != 0), A and B K-major in shared
// memory: 128 fp32 accumulators per thread.
__device__ __forceinline__ void wgmma_m64n256k16_ss(float (&d)[128], uint64_t desc_a,
                                                    uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" KS_WGMMA_REGS128 "}, "
      "%128, %129, p, 1, 1, 0, 0;\n}\n"
      : KS_WGMMA_ACC128(d)
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// d [64 x 128] = A [64 x 16] B [16 x 128] (+ d when scale_d != 0), A and B K-major in shared
// memory.
__device__ __forceinline__ void wgmma_m64n128k16_ss(float (&d)[64], uint64_t desc_a,
                                                    uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" KS_WGMMA_REGS64 "}, "
      "%64, %65, p, 1, 1, 0, 0;\n}\n"
      : KS_WGMMA_ACC64(d)
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// d [64 x 64] = A [64 x 16] B [16 x 64] (+ d when scale_d != 0), A and B K-major in shared
// memory.
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], uint64_t desc_a,
                                                   uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" KS_WGMMA_REGS32 "}, "
      "%32, %33, p, 1, 1, 0, 0;\n}\n"
      : KS_WGMMA_ACC32(d)
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// d [64 x 32] = A [64 x 16] B [16 x 32] (+ d when scale_d != 0), A and B K-major in shared
// memory.
__device__ __forceinline__ void wgmma_m64n32k16_ss(float (&d)[16], uint64_t desc_a,
                                                   uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {" KS_WGMMA_REGS16 "}, "
      "%16, %17, p, 1, 1, 0, 0;\n}\n"
      : KS_WGMMA_ACC16(d)
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// d [64 x N] += A [64 x 16] B [16 x N], A from registers (each warp's 16 rows as the
// m16n8k16 A fragment), B MN-major in shared memory (transposed); N = 64 and 128.
__device__ __forceinline__ void wgmma_m64n64k16_rs_tb(float (&d)[32], const uint32_t (&a)[4],
                                                      uint64_t desc_b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" KS_WGMMA_REGS32 "}, "
      "{%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
      : KS_WGMMA_ACC32(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}
__device__ __forceinline__ void wgmma_m64n128k16_rs_tb(float (&d)[64], const uint32_t (&a)[4],
                                                       uint64_t desc_b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" KS_WGMMA_REGS64 "}, "
      "{%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
      : KS_WGMMA_ACC64(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}

#undef KS_WGMMA_ACC16
#undef KS_WGMMA_REGS16
#undef KS_WGMMA_ACC32
#undef KS_WGMMA_ACC128
#undef KS_WGMMA_REGS128
#undef KS_WGMMA_ACC64
#undef KS_WGMMA_REGS32
#undef KS_WGMMA_REGS64

}  // namespace kestrel::kernels::sm90
