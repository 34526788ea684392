// Step 1 of top_k rows' split path (sampling_topk.h says why it keeps the one-block
// sampler's candidates): one block of 512 threads per (row, segment of kTopKSegment ids)
// takes the segment's max and the histogram of its keys' top 11 bits, finds the bin of the
// segment's own k-th largest key, and writes the ids at or above that bin, in id order, with
// their values. The one-block kernel (sampling.cu) reads every segment's list of its row.
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/sampling/sampling_select.cuh"
#include "backend/cuda/sampling/sampling_topk.h"
#include "core/error.h"

namespace kestrel::sampling_kernels {
namespace {

constexpr int kItems = kTopKSegment / kThreads;  // loads a thread
static_assert(kItems * kThreads == kTopKSegment);
static_assert(kItems * kWarps <= kThreads, "one scan entry a thread");

struct SegmentSmem {
  uint32_t count[kBins];
  uint32_t place[kItems * kWarps];  // (load, warp) counts, then their exclusive prefix
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
  const int vocab = args.vocab;
  const float* x = p.processed_row >= 0
                       ? args.processed + static_cast<int64_t>(p.processed_row) * vocab
                       : args.logits + static_cast<int64_t>(row) * vocab;
  const int base = seg * kTopKSegment;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

  for (int b = threadIdx.x; b < kBins; b += kThreads) s.count[b] = 0;
  if (threadIdx.x == 0) s.max_key = float_key(kNegInf);
  // Load i of a thread is id base + i * kThreads + threadIdx.x: a warp reads 32 consecutive
  // ids, and (load, warp, lane) is id order.
  float v[kItems];
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int j = base + i * kThreads + static_cast<int>(threadIdx.x);
    v[i] = j < vocab ? __ldg(x + j) : 0.0f;
  }
  const int valid = min(vocab - base, kTopKSegment);
  __syncthreads();
  float m = kNegInf;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    if (i * kThreads + static_cast<int>(threadIdx.x) < valid) {
      m = fmaxf(m, v[i]);
      atomicAdd(&s.count[float_key(v[i]) >> 21], 1u);
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(kFullMask, m, o));
  if (lane == 0) atomicMax(&s.max_key, float_key(m));
  __syncthreads();
  m = key_float(s.max_key);

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

  // Ordered compaction: each (load, warp) counts its kept lanes, a block scan places them.
  const uint32_t b = static_cast<uint32_t>(bin);
  const uint32_t lanes_below = (1u << lane) - 1u;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const bool take =
        i * kThreads + static_cast<int>(threadIdx.x) < valid && (float_key(v[i]) >> 21) >= b;
    const uint32_t ballot = __ballot_sync(kFullMask, take);
    if (lane == 0) s.place[i * kWarps + warp] = __popc(ballot);
  }
  __syncthreads();
  const uint32_t mine = threadIdx.x < kItems * kWarps ? s.place[threadIdx.x] : 0u;
  uint32_t total;
  const uint32_t at = block_exclusive_scan(mine, &total, s);
  if (threadIdx.x < kItems * kWarps) s.place[threadIdx.x] = at;
  __syncthreads();
  const size_t list = (static_cast<size_t>(row) * sc.num_segments + seg) * kTopKSegmentCap;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const bool take =
        i * kThreads + static_cast<int>(threadIdx.x) < valid && (float_key(v[i]) >> 21) >= b;
    const uint32_t ballot = __ballot_sync(kFullMask, take);
    if (take) {
      const size_t slot = list + s.place[i * kWarps + warp] + __popc(ballot & lanes_below);
      sc.ids[slot] = base + i * kThreads + static_cast<int>(threadIdx.x);
      sc.values[slot] = v[i];
    }
  }
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
