// The split passes of top_p and min_p rows without top_k (sampling_nucleus.cu): the one-block
// sampler's three passes over such a row (max; the histogram of a = (x - max) / T; the
// compaction of the bins that can hold the nucleus, with the weights and the row's mass)
// spread over many blocks, so that one row (batch 1) uses the whole GPU instead of one SM.
// The one-block kernel (sampling.cu) then starts from the compacted candidates. The design is
// in docs/gpu_sampling.md.
//
// Every step is the one-block path's on the same values: the same max, the same histogram,
// so the same lowest bin and the same candidates in the same id order with the same weights.
// Only the row's mass (the top_p total) is summed in another order, in double: the token can
// differ from the one-block path's only where the draw lands within ~1e-16 of a boundary.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/sampling/sampling.h"
#include "backend/cuda/sampling/sampling_topk.h"
#include "core/host_device.h"

namespace kestrel::sampling_kernels {

// Candidates a row may have (the one-block kernel's shared list); more: the one-block passes.
constexpr int kNucleusListCap = 8192;
// The a-histogram's bins (sampling_device.cuh's kABins).
constexpr int kNucleusBins = 2048;
// Most such rows a batch may have for the split passes (three reads of the row, where top_k
// rows need one): on an H100 they lost from 128 rows on (docs/gpu_sampling.md).
constexpr int kNucleusSplitMaxRows = 64;

// Random sampling with top_p or min_p, no top_k, no logprobs (penalties allowed). Segments
// are sampling_topk.h's (kTopKSegment ids).
KS_HOST_DEVICE inline bool takes_nucleus_split(const RowParams& p) {
  return p.temperature > 0.0f && p.top_k == 0 && (p.top_p < 1.0f || p.min_p > 0.0f) &&
         p.num_logprobs < 0;
}

// What a segment's compaction leaves: its candidates at [first, first + count) of the row's
// list (count -1: the row's list overflowed, or the row has more candidates than the cap),
// and the mass of all its ids as the one-block path sums it (candidates' exact weights,
// expf of the others).
struct NucleusSegment {
  double mass;
  int32_t first;
  int32_t count;
};
static_assert(sizeof(NucleusSegment) == 16);

// The scratch of the split passes, carved from SampleArgs::nucleus_scratch.
struct NucleusScratch {
  NucleusSegment* segments = nullptr;  // [rows, segments]
  float* seg_max = nullptr;            // [rows, segments]
  uint32_t* hist = nullptr;            // [rows, kNucleusBins], summed over the segments
  uint32_t* fill = nullptr;            // [rows]: list slots taken
  int32_t* ids = nullptr;              // [rows, kNucleusListCap]
  float* weights = nullptr;            // [rows, kNucleusListCap]
  int num_segments = 0;

  KS_HOST_DEVICE static NucleusScratch carve(void* base, int num_rows, int vocab) {
    NucleusScratch s;
    s.num_segments = topk_segments(vocab);
    const size_t n = static_cast<size_t>(num_rows) * s.num_segments;
    const size_t rows = static_cast<size_t>(num_rows);
    s.segments = static_cast<NucleusSegment*>(base);
    s.seg_max = reinterpret_cast<float*>(s.segments + n);
    s.hist = reinterpret_cast<uint32_t*>(s.seg_max + n);
    s.fill = s.hist + rows * kNucleusBins;
    s.ids = reinterpret_cast<int32_t*>(s.fill + rows);
    s.weights = reinterpret_cast<float*>(s.ids + rows * kNucleusListCap);
    return s;
  }
};

// Device bytes of the split passes' scratch; 0 when the vocabulary has too many segments.
size_t nucleus_scratch_bytes(int num_rows, int vocab);

// The three split passes for every row with takes_nucleus_split (others are left alone):
// segment maxima, the a-histogram (rows with top_p), the compaction. REQUIRES
// args.nucleus_scratch of nucleus_scratch_bytes(num_rows, vocab) bytes and the processed rows
// already written.
void launch_nucleus_segments(const SampleArgs& args, cudaStream_t stream);

}  // namespace kestrel::sampling_kernels
