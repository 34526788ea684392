// Synchronisation for warp-specialised kernels (sm_90a): named barriers between some of a
// CTA's warps, per-warpgroup register budgets (setmaxnreg), and cp.async copies that complete
// on a shared-memory mbarrier (tma.cuh has the mbarrier itself). Included by sm_90a .cu files
// only.
#pragma once

#include <cstdint>

namespace kestrel::kernels::sm90 {

// Named barrier `id` (1..15; 0 is __syncthreads) over `threads` threads, a multiple of 32.
// sync waits for the barrier; arrive counts toward it without waiting. Both order this
// thread's earlier memory accesses before the barrier completes.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Named barrier `id` over `threads` threads that also ANDs a predicate over them: true for
// every participant iff `pred` was true for all.
__device__ __forceinline__ bool named_barrier_and(int id, int threads, bool pred) {
  int all;
  asm volatile(
      "{\n.reg .pred p, q;\nsetp.ne.b32 p, %1, 0;\n"
      "bar.red.and.pred q, %2, %3, p;\nselp.b32 %0, 1, 0, q;\n}\n"
      : "=r"(all)
      : "r"(static_cast<int>(pred)), "r"(id), "r"(threads)
      : "memory");
  return all != 0;
}

// Gives this warpgroup's registers back to the CTA's pool (dec) or takes more from it (inc):
// every thread of the warpgroup calls it; N is a multiple of 8 in [24, 256]. Lets a few
// warps that only copy run on few registers while the warps doing maths get many.
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

// One arrival on the mbarrier at shared address bar.
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// `count` arrivals on the mbarrier at bar in one operation.
__device__ __forceinline__ void mbar_arrive(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(count)
               : "memory");
}

// One arrival on bar once every cp.async this thread issued so far has landed (the barrier's
// expected count includes it: .noinc). The arrival is the copy unit's: the thread does not
// touch the barrier itself (an increment per thread, without .noinc, measured 7% slower).
__device__ __forceinline__ void cp_async_mbar_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

}  // namespace kestrel::kernels::sm90
