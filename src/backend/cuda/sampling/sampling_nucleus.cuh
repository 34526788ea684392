// Candidate bounds of top_p and min_p rows without top_k, shared by the one-block sampler
// (sampling.cu) and the split passes of those rows (sampling_nucleus.cu): the bin of
// a = (logit - max) / temperature over [-kARange, 0], the lowest bin min_p can keep, and the
// lowest bin that must hold the top_p nucleus, from the a-histogram.
#pragma once

#include "backend/cuda/sampling/sampling_device.cuh"

namespace kestrel::sampling_kernels {

__device__ __forceinline__ int a_bin(float v, float max, float temperature) {
  const float a = __fdiv_rn(__fsub_rn(v, max), temperature);
  if (!(a >= -kARange)) return 0;
  return min(static_cast<int>((a + kARange) * (kABins / kARange)), kABins - 1);
}

// Lowest a-bin that can hold a token of weight >= min_p (one bin of margin for rounding).
__device__ inline int min_p_bin(float min_p) {
  const float a = logf(min_p);
  if (!(a >= -kARange)) return 0;
  return max(min(static_cast<int>((a + kARange) * (kABins / kARange)), kABins - 1) - 1, 0);
}

// From the a-histogram `hist` (kABins counts, in shared memory): the lowest bin L such that
// the bins >= L must hold the top_p nucleus, i.e. an upper bound of the mass below L is <= (1 - top_p) times a
// lower bound of the total; one bin of margin keeps weights that round equal across a bin
// edge. Returns L and sets *count to the tokens in bins >= max(L, floor_bin).
template <typename S>
__device__ int top_p_bin(float top_p, int floor_bin, int* count, const uint32_t* hist, S& s) {
  constexpr int kPer = kABins / kThreads;
  constexpr double kWidth = static_cast<double>(kARange) / kABins;
  const int first = threadIdx.x * kPer;
  double tail[kPer], tail_sum = 0.0, total_lo = 0.0;
  for (int i = 0; i < kPer; ++i) {
    const int b = first + i;
    const double n = hist[b];
    const double a_lo = -kARange + b * kWidth, a_hi = fmin(a_lo + kWidth, 0.0);
    total_lo += b == 0 ? 0.0 : n * exp(a_lo - 1e-4);
    tail[i] = n * exp(fmin(a_hi + 1e-4, 0.0));
    tail_sum += tail[i];
  }
  total_lo = block_sum(total_lo, s);
  double all;
  double below = block_exclusive_scan(tail_sum, &all, s);
  const double budget = (1.0 - static_cast<double>(top_p)) * total_lo * (1.0 - 1e-3);
  if (threadIdx.x == 0) s.found_bin = 0;
  __syncthreads();
  for (int i = 0; i < kPer; ++i) {
    if (below <= budget) atomicMax(&s.found_bin, first + i);
    below += tail[i];
  }
  __syncthreads();
  const int lowest = max(max(s.found_bin - 1, 0), floor_bin);
  uint32_t mine = 0;
  for (int i = 0; i < kPer; ++i) mine += first + i >= lowest ? hist[first + i] : 0u;
  *count = static_cast<int>(block_sum(mine, s));
  return lowest;
}

}  // namespace kestrel::sampling_kernels
