// A barrier over every CTA of a grid, for persistent kernels whose CTAs are all resident at
// once (the launcher sizes the grid from the occupancy calculator; a CTA that is not resident
// while others wait here would never arrive: a hang, not an error).
//
// The counter is self-resetting, as cooperative groups' grid sync is: per barrier CTA 0 adds
// 2^31 - (G - 1) and every other CTA adds 1, so the sum is 2^31: bit 31 flips when the last
// CTA arrives and the low bits are back to what they were (zero). A CTA waits for the flip of
// the value it saw when it arrived. So one zeroed counter serves any number of barriers and
// launches, provided that no two grids use it at once.
#pragma once

#include <cstdint>

namespace kestrel::kernels {

__device__ __forceinline__ void grid_sync(unsigned* counter) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned add = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u;
    __threadfence();  // the CTA's writes (ordered before by the barrier) before the arrival
    const unsigned seen = atomicAdd(counter, add);
    unsigned now;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(counter) : "memory");
    } while (((seen ^ now) & 0x80000000u) == 0);
    __threadfence();
  }
  __syncthreads();
}

}  // namespace kestrel::kernels
