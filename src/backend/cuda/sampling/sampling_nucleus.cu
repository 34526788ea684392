// The split passes of top_p / min_p rows without top_k (sampling_nucleus.h says what they
// keep of the one-block path). Three kernels, each one block of 512 threads per (row,
// segment of kTopKSegment ids), 16 coalesced loads a thread:
//  1. nucleus_max_kernel: the segment's max (segment 0 also clears the row's histogram and
//     list fill counter);
//  2. nucleus_hist_kernel (rows with top_p): the row max M from the segment maxima, and the
//     segment's histogram of a_bin(x, M, T) added into the row's;
//  3. nucleus_compact_kernel: from the row's histogram, the lowest bin that can hold the
//     nucleus (top_p_bin, every block the same) and min_p's floor bin; the segment's ids at
//     or above it with their weights go to the row's list at a place taken by one atomic,
//     and the segment's mass as the one-block path sums it.
// The one-block kernel (sampling.cu, gather_nucleus_candidates) copies the segments' lists in
// segment order.
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/sampling/sampling_nucleus.cuh"
#include "backend/cuda/sampling/sampling_nucleus.h"
#include "backend/cuda/sampling/sampling_segment.cuh"
#include "backend/cuda/sampling/sampling_select.cuh"
#include "core/error.h"

namespace kestrel::sampling_kernels {
namespace {

static_assert(kNucleusBins == kABins && kNucleusListCap == kListCap);

struct NucleusSmem {
  uint32_t count[kABins];
  uint32_t place[kSegmentPlaces];
  unsigned long long scan_tmp[kWarps + 1];
  uint32_t max_key;
  uint32_t base;
  int found_bin;
  unsigned long long found_value;
};

// The row max from its segments' maxima.
__device__ float row_max(const NucleusScratch& sc, int row, NucleusSmem& s) {
  float m = kNegInf;
  for (int g = threadIdx.x; g < sc.num_segments; g += kThreads) {
    m = fmaxf(m, sc.seg_max[static_cast<size_t>(row) * sc.num_segments + g]);
  }
  return block_max_key(m, s.max_key);
}

__global__ void __launch_bounds__(kThreads) nucleus_max_kernel(SampleArgs args, NucleusScratch sc) {
  __shared__ uint32_t max_key;
  const int row = blockIdx.x;
  const RowParams p = args.rows[row];
  if (!takes_nucleus_split(p)) return;
  const int seg = blockIdx.y;
  float v[kSegmentItems];
  const int valid = load_segment(split_row(args, row, p), args.vocab, seg, v);
  if (seg == 0) {
    for (int b = threadIdx.x; b < kNucleusBins; b += kThreads) {
      sc.hist[static_cast<size_t>(row) * kNucleusBins + b] = 0;
    }
    if (threadIdx.x == 0) sc.fill[row] = 0;
  }
  float m = kNegInf;
#pragma unroll
  for (int i = 0; i < kSegmentItems; ++i) m = in_segment(i, valid) ? fmaxf(m, v[i]) : m;
  m = block_max_key(m, max_key);
  if (threadIdx.x == 0) sc.seg_max[static_cast<size_t>(row) * sc.num_segments + seg] = m;
}

__global__ void __launch_bounds__(kThreads) nucleus_hist_kernel(SampleArgs args, NucleusScratch sc) {
  __shared__ NucleusSmem s;
  const int row = blockIdx.x;
  const RowParams p = args.rows[row];
  if (!takes_nucleus_split(p) || !(p.top_p < 1.0f)) return;
  float v[kSegmentItems];
  const int valid = load_segment(split_row(args, row, p), args.vocab, blockIdx.y, v);
  for (int b = threadIdx.x; b < kABins; b += kThreads) s.count[b] = 0;
  const float max = row_max(sc, row, s);  // its barriers also order the clearing
  // Most ids of a peaked row fall below the histogram's range, into bin 0: a warp counts
  // those with one atomic.
  uint32_t low = 0;
#pragma unroll
  for (int i = 0; i < kSegmentItems; ++i) {
    const bool in = in_segment(i, valid);
    const int b = in ? a_bin(v[i], max, p.temperature) : 0;
    low += __popc(__ballot_sync(kFullMask, in && b == 0));
    if (in && b != 0) atomicAdd(&s.count[b], 1u);
  }
  if (threadIdx.x % 32 == 0 && low != 0) atomicAdd(&s.count[0], low);
  __syncthreads();
  uint32_t* hist = sc.hist + static_cast<size_t>(row) * kNucleusBins;
  for (int b = threadIdx.x; b < kABins; b += kThreads) {
    if (s.count[b] != 0) atomicAdd(&hist[b], s.count[b]);
  }
}

__global__ void __launch_bounds__(kThreads) nucleus_compact_kernel(SampleArgs args, NucleusScratch sc) {
  __shared__ NucleusSmem s;
  const int row = blockIdx.x;
  const RowParams p = args.rows[row];
  if (!takes_nucleus_split(p)) return;
  const int seg = blockIdx.y;
  const float t = p.temperature;
  float v[kSegmentItems];
  const int valid = load_segment(split_row(args, row, p), args.vocab, seg, v);
  const bool top_p = p.top_p < 1.0f;
  if (top_p) {
    const uint32_t* hist = sc.hist + static_cast<size_t>(row) * kNucleusBins;
    for (int b = threadIdx.x; b < kABins; b += kThreads) s.count[b] = hist[b];
  }
  const float max = row_max(sc, row, s);
  const int floor_bin = p.min_p > 0.0f ? min_p_bin(p.min_p) : 0;
  int lowest = floor_bin, candidates = 0;
  if (top_p) lowest = top_p_bin(p.top_p, floor_bin, &candidates, s.count, s);
  NucleusSegment* out = sc.segments + static_cast<size_t>(row) * sc.num_segments + seg;
  if (candidates > kNucleusListCap) {
    if (threadIdx.x == 0) *out = NucleusSegment{0.0, 0, -1};
    return;
  }
  // The one-block path's compaction: candidates carry their exact weight, and every id
  // adds to the mass (the others with the fast expf).
  double mass = 0.0;
  uint32_t flags = 0;
#pragma unroll
  for (int i = 0; i < kSegmentItems; ++i) {
    if (!in_segment(i, valid)) continue;
    if (a_bin(v[i], max, t) >= lowest) {
      v[i] = sample_weight(v[i], max, t);
      mass += v[i];
      flags |= 1u << i;
    } else {
      mass += expf(__fdiv_rn(__fsub_rn(v[i], max), t));
    }
  }
  const uint32_t total = place_segment(flags, s.place, s);
  if (threadIdx.x == 0) s.base = total == 0 ? 0u : atomicAdd(&sc.fill[row], total);
  mass = block_sum(mass, s);  // its barriers publish place and base
  const uint32_t base = s.base;
  if (base + total > static_cast<uint32_t>(kNucleusListCap)) {
    if (threadIdx.x == 0) *out = NucleusSegment{mass, 0, -1};
    return;
  }
  const size_t list = static_cast<size_t>(row) * kNucleusListCap + base;
  write_segment(flags, s.place, [&](int i, uint32_t offset) {
    sc.ids[list + offset] = segment_id(seg, i);
    sc.weights[list + offset] = v[i];
  });
  if (threadIdx.x == 0) *out = NucleusSegment{mass, static_cast<int32_t>(base), static_cast<int32_t>(total)};
}

}  // namespace

size_t nucleus_scratch_bytes(int num_rows, int vocab) {
  const int segments = topk_segments(vocab);
  if (segments > kTopKMaxSegments) return 0;
  const size_t n = static_cast<size_t>(num_rows) * segments;
  const size_t rows = static_cast<size_t>(num_rows);
  return n * (sizeof(NucleusSegment) + sizeof(float)) +
         rows * (kNucleusBins + 1) * sizeof(uint32_t) +
         rows * kNucleusListCap * (sizeof(int32_t) + sizeof(float));
}

void launch_nucleus_segments(const SampleArgs& args, cudaStream_t stream) {
  KS_ASSERT(args.nucleus_scratch != nullptr, "sampler: the split top_p passes need their scratch");
  const NucleusScratch sc = NucleusScratch::carve(args.nucleus_scratch, args.num_rows, args.vocab);
  KS_ASSERT(sc.num_segments <= kTopKMaxSegments, "sampler: {} segments are too many",
            sc.num_segments);
  const dim3 grid(args.num_rows, sc.num_segments);
  nucleus_max_kernel<<<grid, kThreads, 0, stream>>>(args, sc);
  KS_CUDA_CHECK_LAUNCH("nucleus_max_kernel");
  nucleus_hist_kernel<<<grid, kThreads, 0, stream>>>(args, sc);
  KS_CUDA_CHECK_LAUNCH("nucleus_hist_kernel");
  nucleus_compact_kernel<<<grid, kThreads, 0, stream>>>(args, sc);
  KS_CUDA_CHECK_LAUNCH("nucleus_compact_kernel");
}

}  // namespace kestrel::sampling_kernels
