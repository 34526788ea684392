// The tensor-core path of paged_attention (attention_prefill.cu), used by attention.cu's
// dispatcher for batches with prefill rows (host-side max_query_len > 1) at head dims 64 and
// 128. Internal to the attention files.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/kernels.h"

namespace kestrel::kernels::detail {

// True when the tensor-core kernel takes `a`: not a pure decode batch (those take the decode
// kernel), head dim 64 or 128, any GQA group up to kMaxAttentionGroup.
bool use_prefill_kernel(const PagedAttentionArgs& a);

// Launches the tensor-core kernel. With split.num_splits > 1 it writes fp32 partials to
// part_ml [splits, T Hq, 2] (log2-domain max, sum) and part_acc [splits, T Hq, D]
// (unnormalised) for attention.cu's merge kernel; otherwise a.out directly.
void prefill_attention(const PagedAttentionArgs& a, const AttentionSplit& split, float* part_ml,
                       float* part_acc, cudaStream_t stream);

// The grid of both prefill kernels: grid.x = ceil(T / q_tile) + B CTAs bound the (sequence,
// query tile) pairs (attention_tiles.cuh's lookup) unless every sequence has max_query_len
// new tokens: then *uniform_tiles = tiles per sequence and grid.x = B x that (CTAs map to
// tiles directly, longest first); grid.y KV heads, grid.z key splits.
dim3 prefill_grid(const PagedAttentionArgs& a, const AttentionSplit& split, int q_tile,
                  int* uniform_tiles);

// The same on Hopper's warpgroup tensor cores (compiled for sm_90a only), bf16 caches:
// - prefill_attention_sm90 (attention_prefill_sm90a.cu): two warpgroups in step;
// - prefill_attention_sm90_ws (attention_prefill_ws_sm90a.cu): a copying warpgroup and two
//   computing ones that take turns on the tensor cores.
// prefill_attention() picks one on compute capability 9.0 (prefill_sm90_kernel): the
// warp-specialised one unless KESTREL_PREFILL_SM90 is 0 (none: the mma.sync kernel) or step
// (the in-step one); read at each launch, so tests and benchmarks can compare.
void prefill_attention_sm90(const PagedAttentionArgs& a, const AttentionSplit& split,
                            float* part_ml, float* part_acc, cudaStream_t stream);
void prefill_attention_sm90_ws(const PagedAttentionArgs& a, const AttentionSplit& split,
                               float* part_ml, float* part_acc, cudaStream_t stream);
enum class PrefillSm90 { kNone, kInStep, kWarpSpecialized };
PrefillSm90 prefill_sm90_kernel();

}  // namespace kestrel::kernels::detail
