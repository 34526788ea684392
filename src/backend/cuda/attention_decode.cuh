// The decode fast path of paged_attention (attention_decode.cu), used by attention.cu's
// dispatcher when every row of the batch is a decode (query length 1) and the GQA group is
// small enough for its registers. Internal to the attention files.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/kernels.h"

namespace kestrel::kernels::detail {

// Largest GQA group the decode kernel takes; larger groups use the general kernel.
constexpr int kMaxDecodeGroup = 8;
// CTAs of the decode kernel resident per SM, as the split plan assumes (registers allow 4 at
// groups up to 2; see the kernel's launch bounds).
constexpr int kDecodeCtasPerSm = 4;

// True when `a` is a pure decode batch (host-side max_query_len == 1, one token per
// sequence) with a group of at most kMaxDecodeGroup and a supported head dim.
bool use_decode_kernel(const PagedAttentionArgs& a);

// Launches the decode kernel over grid (B, Hkv, split.num_splits). With num_splits > 1 it
// writes fp32 partials to part_ml [splits, T Hq, 2] (log2-domain max, sum) and part_acc
// [splits, T Hq, D] (unnormalised) for attention.cu's merge kernel; otherwise it writes
// a.out directly.
void decode_attention(const PagedAttentionArgs& a, const AttentionSplit& split, float* part_ml,
                      float* part_acc, cudaStream_t stream);

}  // namespace kestrel::kernels::detail
