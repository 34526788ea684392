// The decode fast path of paged_attention (attention_decode.cu), used by attention.cu's
// dispatcher when every row of the batch is a decode (query length 1). Internal to the
// attention files.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/kernels.h"

namespace kestrel::kernels::detail {

// Largest GQA group the decode kernel takes (kMaxAttentionGroup: every group).
constexpr int kMaxDecodeGroup = 16;
// Query heads one CTA serves; a larger group is cut into several CTAs (parts) of at most this
// many heads, which read the same K/V (the second read mostly from L2).
constexpr int kMaxDecodeRows = 8;
// CTAs of the decode kernel resident per SM, as the split plan assumes without a device at
// hand: at groups up to 2, 80 registers and 32 KB of shared memory per 128-thread CTA allow
// 6. decode_ctas_per_sm() asks the runtime about the compiled kernel (the fused one, with
// more registers, fits fewer).
constexpr int kDecodeCtasPerSm = 6;
// REQUIRES: use_decode_kernel(a). Resident CTAs per SM of the kernel decode_attention picks.
int decode_ctas_per_sm(const PagedAttentionArgs& a, bool rope);

// How a GQA group's query heads are shared over CTAs: `parts` CTAs of `rows` heads each (the
// last may have fewer), parts = ceil(group / kMaxDecodeRows).
struct DecodeRows {
  int group = 1;
  int parts = 1;
  int rows = 1;
};
DecodeRows decode_rows(const PagedAttentionArgs& a);

// True when `a` is a pure decode batch (host-side max_query_len == 1, one token per
// sequence) with a group of at most kMaxDecodeGroup and a supported head dim.
bool use_decode_kernel(const PagedAttentionArgs& a);

// Launches the decode kernel over grid (B parts, Hkv, split.num_splits). With num_splits > 1
// it writes fp32 partials to part_ml [splits, T Hq, 2] (log2-domain max, sum) and part_acc
// [splits, T Hq, D] (unnormalised), and the last CTA of each (sequence, KV head, part) to
// finish merges them into a.out (a.split_counters); otherwise it writes a.out directly.
// rope.qkv non-null: q, k, v come from the qkv product (paged_attention_rope in kernels.h).
void decode_attention(const PagedAttentionArgs& a, const QkNormRopeArgs& rope,
                      const AttentionSplit& split, float* part_ml, float* part_acc,
                      cudaStream_t stream);

// True when `a` is a decode batch (use_decode_kernel) at head dim 64 or 128, group <= 16,
// over an fp8 cache, or over a bf16 one with at least kDecodeMmaMinBf16Seqs sequences
// (KESTREL_DECODE_MMA_BF16=N moves that to N, 0 turns it off): it takes the tensor-core
// decode kernel (attention_decode_mma.cu) instead, whose key splits are the general kernel's
// (no tail halves) and whose partials attention.cu's merge kernel combines. A bf16 batch of
// one keeps the CUDA-core kernel. Since the RoPE/store kernel is fused into the tensor-core
// one (session 15), that kernel wins from two sequences up (H200, 1,024-token prompts, decode
// step, CUDA-core -> tensor-core: 2 sequences 0.873 -> 0.813 ms, 3: 0.985 -> 0.951, 4: 1.001
// -> 0.969, 8: 1.334 -> 1.251), but not at one (512-token prompt 0.719 -> 0.755 ms, 1,024:
// 0.760 -> 0.765; only at 4,096 keys 0.991 -> 0.962), and graphs, captured per batch size,
// cannot choose by context length (docs/cuda_backend.md, "Small decode batches").
bool use_decode_mma(const PagedAttentionArgs& a);
constexpr int kDecodeMmaMinBf16Seqs = 2;
// Its CTAs resident per SM for a's batch on num_sms SMs: 3, or 2 for a bf16 batch at D = 128
// that takes rings of three 16-key tiles a warp (102 KB a CTA; attention_decode_mma.cuh,
// bf16_ring_tiles, chooses by how the batch fills its waves).
int decode_mma_ctas_per_sm(const PagedAttentionArgs& a, int num_sms);
// Launches it over grid (Hkv, B, split.num_splits); with num_splits > 1 it writes partials
// (part_ml [splits, T Hq, 2], part_acc [splits, T Hq, D]) for the merge, else a.out.
void decode_mma_attention(const PagedAttentionArgs& a, const AttentionSplit& split,
                          float* part_ml, float* part_acc, cudaStream_t stream);

// True when paged_attention_rope runs `a` on the tensor-core kernel with qk_norm_rope_store
// fused in (decode_mma_attention_rope): use_decode_mma(a) with a group whose q rows fit its
// shared memory (all up to 16, but 7 for fp8 at D = 128) and a batch whose CTAs fit one
// wave (num_seqs x num_kv_heads <= SMs x decode_mma_ctas_per_sm(a, SMs); the environment variable
// KESTREL_DECODE_MMA_ROPE=N allows N sequences instead, 0 none). Otherwise
// paged_attention_rope is not offered (attention_rope_supported) and the store kernel runs
// before the plain one. Why one wave: every CTA pays the fused prologue's round trip and two
// barriers before its first tile, once per wave, where the store kernel costs one launch for
// the whole batch. H200, Qwen3-0.6B shapes (8 KV heads: one wave is 49 sequences), 1,024-token
// prompts, decode step with the store kernel -> fused: 16 sequences 1.711 -> 1.640 ms, 32
// 2.217 -> 2.068 ms, 64 3.272 -> 3.306 ms, 256 (decode256) at par (docs/cuda_backend.md).
bool use_decode_mma_rope(const PagedAttentionArgs& a);
// decode_mma_attention with q, k, v from rope.qkv (kernels.h paged_attention_rope): each
// CTA norms and rotates its q heads; the one whose split ends at the new token computes that
// token's K/V, stores them at rope.slot_mapping and attends over them. The keys before it
// are copied before the previous kernel has finished.
void decode_mma_attention_rope(const PagedAttentionArgs& a, const QkNormRopeArgs& rope,
                               const AttentionSplit& split, float* part_ml, float* part_acc,
                               cudaStream_t stream);

}  // namespace kestrel::kernels::detail
