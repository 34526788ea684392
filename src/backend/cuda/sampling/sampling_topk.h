// The split first pass of top_k rows (sampling_topk.cu): the one-block sampler's pass over a
// row (max, key histogram, candidate compaction) spread over many blocks, so that one row
// (batch 1) uses the whole GPU instead of one SM. The one-block kernel (sampling.cu) then
// starts from the gathered candidates. The design is in docs/gpu_sampling.md.
//
// Why a segment's own candidates are enough: the one-block sampler's candidates are the ids
// whose key bin (the top 11 bits of float_key) is at or above the bin g of the row's k-th
// largest key. Each segment of the row keeps the ids at or above the bin l_s of *its own*
// k-th largest key (all of them when it holds fewer than k ids). The row's k-th largest key
// is at least every segment's, so g >= l_s: every candidate of the row is among its
// segment's. The one-block kernel histograms the union, finds g from it (the counts of bins
// >= g are exact there) and keeps the ids of bins >= g, in id order: the same list, so the
// same token, bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/sampling/sampling.h"
#include "core/host_device.h"

namespace kestrel::sampling_kernels {

// Ids of one segment: one block of 512 threads, 16 coalesced loads a thread.
constexpr int kTopKSegment = 8192;
// Candidates a segment may keep; a row with a segment over it takes the one-block passes.
constexpr int kTopKSegmentCap = 512;
// Largest top_k that takes the split pass (a larger k fills the segments' lists).
constexpr int kTopKSplitMax = 256;
// Most top_k rows (or top_p / min_p rows, sampling_nucleus.h) a batch may have for the
// split passes: with more, one block a row already fills the GPU and the split passes cost
// more than they save (docs/gpu_sampling.md has the measurements over batch sizes).
constexpr int kTopKSplitMaxRows = 128;
// Segments a row may have (the one-block kernel scans their counts in shared memory).
constexpr int kTopKMaxSegments = 2048;

KS_HOST_DEVICE inline int topk_segments(int vocab) { return (vocab + kTopKSegment - 1) / kTopKSegment; }

// A row whose first pass is split: random sampling with 1 <= top_k <= kTopKSplitMax (top_p,
// min_p and penalties allowed), no logprobs (their raw-row pass stays one block's).
KS_HOST_DEVICE inline bool takes_topk_split(const RowParams& p) {
  return p.temperature > 0.0f && p.top_k > 0 && p.top_k <= kTopKSplitMax && p.num_logprobs < 0;
}

// What a segment leaves for the one-block kernel.
struct TopKSegment {
  float max;      // fmaxf over the segment (NaN skipped; -inf when nothing else)
  int32_t count;  // candidates kept, or -1 when more than kTopKSegmentCap
};
static_assert(sizeof(TopKSegment) == 8);

// The scratch of the split pass, carved from SampleArgs::topk_scratch:
// [rows, segments] TopKSegment, then [rows, segments, kTopKSegmentCap] ids and as many values.
struct TopKScratch {
  TopKSegment* segments = nullptr;
  int32_t* ids = nullptr;
  float* values = nullptr;
  int num_segments = 0;

  KS_HOST_DEVICE static TopKScratch carve(void* base, int num_rows, int vocab) {
    TopKScratch s;
    s.num_segments = topk_segments(vocab);
    const size_t n = static_cast<size_t>(num_rows) * s.num_segments;
    s.segments = static_cast<TopKSegment*>(base);
    s.ids = reinterpret_cast<int32_t*>(s.segments + n);
    s.values = reinterpret_cast<float*>(s.ids + n * kTopKSegmentCap);
    return s;
  }
};

// Device bytes of the split pass's scratch; 0 when the vocabulary has too many segments
// (every row then takes the one-block passes).
size_t topk_scratch_bytes(int num_rows, int vocab);

// Step 1 of the split path for every row with takes_topk_split (others are left alone):
// grid (rows, segments). REQUIRES args.topk_scratch of topk_scratch_bytes(num_rows, vocab)
// bytes and the processed rows already written.
void launch_topk_segments(const SampleArgs& args, cudaStream_t stream);

}  // namespace kestrel::sampling_kernels
