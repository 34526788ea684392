// The penalties pass of the device sampler (sample_rows runs it first): each processed row
// (penalties, logit bias, min_tokens' masked ids, an allowed-token mask or a pending output
// token) is copied from the raw logits to the processed buffer, -inf where its mask has a
// clear bit, and its PenaltyEntry list (one entry per distinct id, merged on the host) is
// applied with the CPU sampler's float arithmetic.
//
// Geometry: one block of kThreads per (segment of kPenaltySegment ids, processed row). A
// block copies its segment with kPenaltyItems independent loads a thread in flight, then
// applies the row's entries that fall in it. Until session 29 one block copied a whole row:
// at batch 1 that was one SM's latency-bound walk over 152k logits, ~60 us of a 0.85 ms
// single-stream step.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/sampling/sampling.h"
#include "backend/cuda/sampling/sampling_device.cuh"
#include "core/error.h"

namespace kestrel::sampling_kernels {
namespace {

constexpr int kPenaltyItems = 16;
constexpr int kPenaltySegment = kThreads * kPenaltyItems;  // ids a block copies
constexpr int kMaxGridY = 65535;

__device__ __forceinline__ bool allowed(const uint32_t* mask, int id) {
  return mask == nullptr || ((mask[id >> 5] >> (id & 31)) & 1u);
}

// A logit as the penalties leave it: repetition (divide a positive logit, multiply a
// negative one), then frequency (times the output count) and presence, rounded as the CPU's.
__device__ __forceinline__ float penalised(float l, const RowParams& p, bool repeated, int output_count) {
  const float rep = p.repetition_penalty;
  if (repeated && rep != 1.0f) l = l > 0.0f ? __fdiv_rn(l, rep) : __fmul_rn(l, rep);
  if (output_count > 0 && (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f)) {
    l = __fsub_rn(l, __fmul_rn(p.frequency_penalty, static_cast<float>(output_count)));
    l = __fsub_rn(l, p.presence_penalty);
  }
  return l;
}

// Grid (segments, processed rows). feedback: the token-feedback buffer, read for rows with a
// pending_slot before this launch's sampler writes it.
__global__ void __launch_bounds__(kThreads)
    penalties_kernel(const float* __restrict__ logits, int vocab, const RowParams* __restrict__ rows,
                     const int32_t* __restrict__ processed_rows,
                     const PenaltyEntry* __restrict__ entries, const uint32_t* __restrict__ masks,
                     int mask_words, const int32_t* feedback, float* __restrict__ processed) {
  __shared__ int pending_seen;
  const int row = processed_rows[blockIdx.y];
  const RowParams p = rows[row];
  const int lo = blockIdx.x * kPenaltySegment;
  const int hi = min(vocab, lo + kPenaltySegment);
  // The pending output token, counted as one more output id (at most one a row).
  const int pending = p.pending_slot >= 0 && feedback != nullptr ? feedback[p.pending_slot] : -1;
  if (threadIdx.x == 0) pending_seen = 0;
  const float* src = logits + static_cast<int64_t>(row) * vocab;
  float* dst = processed + static_cast<int64_t>(p.processed_row) * vocab;
  const uint32_t* mask =
      p.mask_row >= 0 ? masks + static_cast<int64_t>(p.mask_row) * mask_words : nullptr;
  float v[kPenaltyItems];
#pragma unroll
  for (int i = 0; i < kPenaltyItems; ++i) {
    const int j = lo + i * kThreads + static_cast<int>(threadIdx.x);
    v[i] = j < hi ? __ldg(src + j) : 0.0f;
  }
#pragma unroll
  for (int i = 0; i < kPenaltyItems; ++i) {
    const int j = lo + i * kThreads + static_cast<int>(threadIdx.x);
    if (j < hi) dst[j] = allowed(mask, j) ? v[i] : kNegInf;
  }
  __syncthreads();
  // Each id appears once per row (the host merged duplicates), so writes never collide.
  // Every block reads the whole list: whether it names the pending token is the row's fact.
  for (int e = p.penalty_begin + threadIdx.x; e < p.penalty_end; e += kThreads) {
    const PenaltyEntry pe = entries[e];
    const bool is_pending = pe.id == pending;
    if (is_pending) pending_seen = 1;
    if (pe.id < lo || pe.id >= hi || !allowed(mask, pe.id)) continue;  // another block's, or -inf
    float l = src[pe.id];
    if (pe.flags & kPenaltyMasked) {
      l = kNegInf;
    } else {
      if (pe.bias != 0.0f) l = __fadd_rn(l, pe.bias);  // logit_bias, before the penalties
      l = penalised(l, p, (pe.flags & kPenaltyRepetition) || is_pending,
                    pe.output_count + (is_pending ? 1 : 0));
    }
    dst[pe.id] = l;
  }
  __syncthreads();
  // A pending token no entry names: an output id seen once.
  if (threadIdx.x == 0 && pending_seen == 0 && pending >= lo && pending < hi && allowed(mask, pending)) {
    dst[pending] = penalised(src[pending], p, true, 1);
  }
}

}  // namespace

void launch_penalties(const SampleArgs& args, cudaStream_t stream) {
  if (args.num_processed == 0) return;
  KS_CHECK(args.num_processed <= kMaxGridY, "sampler: {} processed rows, at most {} a launch",
           args.num_processed, kMaxGridY);
  const dim3 grid((args.vocab + kPenaltySegment - 1) / kPenaltySegment, args.num_processed);
  penalties_kernel<<<grid, kThreads, 0, stream>>>(args.logits, args.vocab, args.rows,
                                                  args.processed_rows, args.penalties, args.masks,
                                                  args.mask_words, args.feedback, args.processed);
  KS_CUDA_CHECK_LAUNCH("penalties_kernel");
}

}  // namespace kestrel::sampling_kernels
