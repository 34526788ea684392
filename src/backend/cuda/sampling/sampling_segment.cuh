// What the split passes (sampling_topk.cu, sampling_nucleus.cu) share: one block of kThreads
// per (row, segment of kTopKSegment ids), each thread holding kSegmentItems of the segment's
// values in registers, and the ordered compaction of the ones a pass keeps.
//
// Load i of a thread is id seg * kTopKSegment + i * kThreads + threadIdx.x: a warp reads 32
// consecutive ids, and (load, warp, lane) is id order, so a compaction places each (load,
// warp)'s kept lanes by one block scan over kSegmentItems * kWarps counts.
#pragma once

#include "backend/cuda/sampling/sampling_device.cuh"
#include "backend/cuda/sampling/sampling_topk.h"

namespace kestrel::sampling_kernels {

constexpr int kSegmentItems = kTopKSegment / kThreads;  // loads a thread
static_assert(kSegmentItems * kThreads == kTopKSegment);
static_assert(kSegmentItems <= 32, "a thread's kept items are bits of one word");
constexpr int kSegmentPlaces = kSegmentItems * kWarps;
static_assert(kSegmentPlaces <= kThreads, "one scan entry a thread");

__device__ __forceinline__ const float* split_row(const SampleArgs& a, int row, const RowParams& p) {
  return p.processed_row >= 0 ? a.processed + static_cast<int64_t>(p.processed_row) * a.vocab
                              : a.logits + static_cast<int64_t>(row) * a.vocab;
}

// Loads this thread's values of the segment; returns the segment's number of ids.
__device__ __forceinline__ int load_segment(const float* x, int vocab, int seg,
                                            float (&v)[kSegmentItems]) {
  const int base = seg * kTopKSegment;
#pragma unroll
  for (int i = 0; i < kSegmentItems; ++i) {
    const int j = base + i * kThreads + static_cast<int>(threadIdx.x);
    v[i] = j < vocab ? __ldg(x + j) : 0.0f;
  }
  return min(vocab - base, kTopKSegment);
}

__device__ __forceinline__ bool in_segment(int i, int valid) {
  return i * kThreads + static_cast<int>(threadIdx.x) < valid;
}

__device__ __forceinline__ int segment_id(int seg, int i) {
  return seg * kTopKSegment + i * kThreads + static_cast<int>(threadIdx.x);
}

// Block-wide max of the values each thread passes (fmaxf, NaN skipped) through one atomic a
// warp on `key` (shared); every thread gets it. Ends with a barrier; its first barrier also
// completes the shared-memory work before the call.
__device__ __forceinline__ float block_max_key(float m, uint32_t& key) {
  if (threadIdx.x == 0) key = float_key(kNegInf);
  __syncthreads();
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(kFullMask, m, o));
  if (threadIdx.x % 32 == 0) atomicMax(&key, float_key(m));
  __syncthreads();
  return key_float(key);
}

// Places this thread's kept items (bit i of `kept`: load i) in id order among the block's:
// place[] gets each (load, warp)'s first place. Returns the block's count. Every thread calls
// it; S has scan_tmp (block_exclusive_scan). Starts after and ends with a barrier.
template <typename S>
__device__ uint32_t place_segment(uint32_t kept, uint32_t* place, S& s) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int i = 0; i < kSegmentItems; ++i) {
    const uint32_t ballot = __ballot_sync(kFullMask, kept >> i & 1u);
    if (lane == 0) place[i * kWarps + warp] = __popc(ballot);
  }
  __syncthreads();
  const uint32_t mine = threadIdx.x < kSegmentPlaces ? place[threadIdx.x] : 0u;
  uint32_t total;
  const uint32_t at = block_exclusive_scan(mine, &total, s);
  if (threadIdx.x < kSegmentPlaces) place[threadIdx.x] = at;
  __syncthreads();
  return total;
}

// Calls write(i, offset) for each kept item i of this thread, offset its place in the
// segment's compacted list (place[] from place_segment).
template <typename Write>
__device__ __forceinline__ void write_segment(uint32_t kept, const uint32_t* place, Write write) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const uint32_t lanes_below = (1u << lane) - 1u;
#pragma unroll
  for (int i = 0; i < kSegmentItems; ++i) {
    const bool take = kept >> i & 1u;
    const uint32_t ballot = __ballot_sync(kFullMask, take);
    if (take) write(i, place[i * kWarps + warp] + __popc(ballot & lanes_below));
  }
}

}  // namespace kestrel::sampling_kernels
