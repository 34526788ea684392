// The one place that knows where a token's K/V row sits in a layer's cache (device side).
// Token-major: [num_blocks, block_size, num_kv_heads, head_dim] (vLLM's FlashAttention layout,
// the CPU backend's). Head-major: [num_blocks, num_kv_heads, block_size, head_dim], so that
// one page of one head is a single contiguous run.
#pragma once

#include <cstdint>

namespace kestrel::kernels {

// Element offset of row (slot, kv_head) where slot = block * block_size + offset in block.
template <bool kHeadMajor>
__device__ __forceinline__ int64_t kv_row_offset(int64_t block, int offset, int kv_head,
                                                 int num_kv_heads, int block_size, int head_dim) {
  if (kHeadMajor) return ((block * num_kv_heads + kv_head) * block_size + offset) * head_dim;
  return ((block * block_size + offset) * num_kv_heads + kv_head) * head_dim;
}

}  // namespace kestrel::kernels
