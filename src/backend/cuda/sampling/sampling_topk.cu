// Step 1 of top_k rows' split path (sampling_topk.h says why it keeps the one-block
// sampler's candidates): one block of 512 threads per (row, segment of kTopKSegment ids)
// takes the segment's max and the histogram of its keys' top 11 bits, finds the bin of the
// segment's own k-th largest key, and writes the ids at or above that bin, in id order, with
// their values. The one-block kernel (sampling.cu) reads every segment's list of its row.
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/sampling/sampling_segment.cuh"
#include "backend/cuda/sampling/sampling_select.cuh"
#include "backend/cuda/sampling/sampling_topk.h"
#include "core/error.h"

namespace kestrel::sampling_kernels {
namespace {

struct SegmentSmem {
  uint32_t count[kBins];
  uint32_t place[kSegmentPlaces];
  unsigned long long scan_tmp[kWarps + 1];
  uint32_t max_key;  // float_key of the segment's max, by one atomicMax a warp
  int found_bin;
  unsigned long long found_value;
};

__global__ void __launch_bounds__(kThreads) topk_segments_kernel(SampleArgs args, TopKScratch sc) {
  __shared__ SegmentSmem s;
  const int row = blockIdx.x;
  const RowParams p = args.rows[row];
  if (!takes_topk_split(p)) return;
  const int seg = blockIdx.y;

  for (int b = threadIdx.x; b < kBins; b += kThreads) s.count[b] = 0;
  float v[kSegmentItems];
  const int valid = load_segment(split_row(args, row, p), args.vocab, seg, v);
  __syncthreads();
  float m = kNegInf;
#pragma unroll
  for (int i = 0; i < kSegmentItems; ++i) {
    if (in_segment(i, valid)) {
      m = fmaxf(m, v[i]);
      atomicAdd(&s.count[float_key(v[i]) >> 21], 1u);
    }
  }
  m = block_max_key(m, s.max_key);  // its barriers also complete the histogram

  // The bin of the segment's k-th largest key; a segment of fewer than k ids keeps them all.
  int bin;
  uint32_t above;
  const uint32_t k = static_cast<uint32_t>(p.top_k);
  int kept;
  if (find_crossing<uint32_t>(
          kBins, [&](int d) { return s.count[d]; }, [&](uint32_t c) { return c >= k; }, &bin,
          &above, s)) {
    kept = static_cast<int>(above + s.count[bin]);
  } else {
    bin = 0;
    kept = valid;
  }
  TopKSegment* out = sc.segments + static_cast<size_t>(row) * sc.num_segments + seg;
  if (kept > kTopKSegmentCap) {
    if (threadIdx.x == 0) *out = TopKSegment{m, -1};
    return;
  }

  const uint32_t b = static_cast<uint32_t>(bin);
  uint32_t take = 0;
#pragma unroll
  for (int i = 0; i < kSegmentItems; ++i) {
    if (in_segment(i, valid) && (float_key(v[i]) >> 21) >= b) take |= 1u << i;
  }
  const uint32_t total = place_segment(take, s.place, s);
  const size_t list = (static_cast<size_t>(row) * sc.num_segments + seg) * kTopKSegmentCap;
  write_segment(take, s.place, [&](int i, uint32_t offset) {
    sc.ids[list + offset] = segment_id(seg, i);
    sc.values[list + offset] = v[i];
  });
  if (threadIdx.x == 0) *out = TopKSegment{m, static_cast<int32_t>(total)};
}

}  // namespace

size_t topk_scratch_bytes(int num_rows, int vocab) {
  const int segments = topk_segments(vocab);
  if (segments > kTopKMaxSegments) return 0;
  const size_t n = static_cast<size_t>(num_rows) * segments;
  return n * sizeof(TopKSegment) + n * kTopKSegmentCap * (sizeof(int32_t) + sizeof(float));
}

void launch_topk_segments(const SampleArgs& args, cudaStream_t stream) {
  KS_ASSERT(args.topk_scratch != nullptr, "sampler: the split top_k pass needs its scratch");
  const TopKScratch sc = TopKScratch::carve(args.topk_scratch, args.num_rows, args.vocab);
  KS_ASSERT(sc.num_segments <= kTopKMaxSegments, "sampler: {} segments are too many",
            sc.num_segments);
  topk_segments_kernel<<<dim3(args.num_rows, sc.num_segments), kThreads, 0, stream>>>(args, sc);
  KS_CUDA_CHECK_LAUNCH("topk_segments_kernel");
}

}  // namespace kestrel::sampling_kernels
