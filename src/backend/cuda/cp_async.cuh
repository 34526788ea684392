// cp.async (sm_80+): 16-byte copies from global to shared memory that stay in flight while
// the thread goes on computing, so a kernel can keep many loads outstanding without holding
// them in registers. A thread waits only for its own copies (cp_async_wait); a barrier is
// needed only when other threads read what it copied. Included by .cu files only.
#pragma once

#include <cstdint>

namespace kestrel::kernels {

// Where the copied bytes are cached on the way: kL1 (.ca: data every warp re-reads), kL2
// (.cg: streamed data read once), kL2Prefetch256 (.cg with a 256-byte L2 prefetch: long
// contiguous streams such as K/V rows or weight rows).
enum class CopyCache { kL1, kL2, kL2Prefetch256 };

// Copies 16 bytes from `gmem` to shared address `smem` (both 16-byte aligned); when !valid
// it reads nothing and writes 16 zero bytes (a source size of 0).
template <CopyCache kCache = CopyCache::kL2>
__device__ __forceinline__ void cp_async_16(uint32_t smem, const void* gmem, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  if constexpr (kCache == CopyCache::kL1) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem),
                 "r"(src_bytes));
  } else if constexpr (kCache == CopyCache::kL2) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem),
                 "r"(src_bytes));
  } else {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(smem),
                 "l"(gmem), "r"(src_bytes));
  }
}

template <CopyCache kCache = CopyCache::kL2>
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  cp_async_16<kCache>(static_cast<uint32_t>(__cvta_generic_to_shared(smem)), gmem, valid);
}

// Copies 8 bytes (both 8-byte aligned; zeros when !valid) through L1, the only way for
// copies under 16 bytes, with a 256-byte L2 prefetch (long contiguous streams: fp8 K/V rows).
__device__ __forceinline__ void cp_async_8(uint32_t smem, const void* gmem, bool valid) {
  const int src_bytes = valid ? 8 : 0;
  asm volatile("cp.async.ca.shared.global.L2::256B [%0], [%1], 8, %2;\n" ::"r"(smem), "l"(gmem),
               "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_8(void* smem, const void* gmem, bool valid) {
  cp_async_8(static_cast<uint32_t>(__cvta_generic_to_shared(smem)), gmem, valid);
}

// Closes the group of copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// The waits clobber memory, so that no read of the copied shared memory is moved above them;
// the copies themselves order nothing (they are asm volatile, so they keep their order).
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Waits for every copy this thread issued, committed or not.
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

}  // namespace kestrel::kernels
