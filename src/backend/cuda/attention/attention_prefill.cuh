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

}  // namespace kestrel::kernels::detail
