// Hopper's tensor memory accelerator (TMA, sm_90): 2-D tiles copied from global to shared
// memory by one thread's instruction, completing on a shared-memory mbarrier. Included by
// sm_90a .cu files only.
//
// Why: a CTA that streams weights with cp.async keeps one request per 16 bytes in flight and
// reaches ~35 GB/s per SM (docs/cuda_backend.md, "Decode-step GEMM on wgmma"); a TMA tile is
// one request, so a few stages of 16-32 KB keep far more bytes in flight per SM.
//
// Use: thread 0 initialises each stage's mbarrier (mbar_init, count 1) and fences it
// (mbar_fence_init) before a CTA barrier. Per stage it calls mbar_expect_tx with the stage's
// total bytes, then issues the copies (tma_load_2d); every consumer waits with
// mbar_wait(bar, parity), parity being the stage's use count mod 2. A tile's rows or columns
// outside the tensor are filled with zeros (and still count toward the bytes).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace kestrel::kernels::sm90 {

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Makes the initialised barriers visible to the async proxy (the TMA unit).
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// Arrives once and adds `bytes` to the transactions the current phase waits for.
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// Waits until the phase with this parity has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// Copies the box at (inner coordinate c0, outer coordinate c1) of `map` into shared memory at
// dst (aligned as the map's swizzle needs: 1024 bytes for 128-byte swizzle); completes on bar.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// The same for a 3-D map: the box at coordinates (c0, c1, c2), innermost first.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int c0, int c1,
                                            int c2, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

// Copies shared memory at src (laid out as the map's box, swizzle included) to the box at
// (c0, c1) of `map`; parts of the box outside the tensor are not written. Asynchronous: the
// issuing thread commits its copies as a group (bulk_commit_group) and later waits for them
// (bulk_wait_read: until src may be overwritten; bulk_wait: until the writes are done). The
// writers of src fence (fence_proxy_async_shared, wgmma.cuh) and meet at a barrier first.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, uint32_t src, int c0,
                                             int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
          reinterpret_cast<uint64_t>(map)),
      "r"(c0), "r"(c1), "r"(src)
      : "memory");
}
__device__ __forceinline__ void bulk_commit_group() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// Waits until at most N of this thread's committed groups still read their shared memory.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

}  // namespace kestrel::kernels::sm90
