// ShardPlan: which part of every weight one tensor-parallel rank holds (Megatron-style, as
// nano-vLLM and vLLM cut a decoder), and the per-rank sizes the forward pass uses.
//
//   weight                  cut           rank r holds
//   q_proj [Hq D, H]        rows (heads)  query heads [r Hq/N, (r+1) Hq/N)
//   k_proj, v_proj          rows (heads)  KV heads [r Hkv/N, ...) when N <= Hkv; when N > Hkv
//                                         (N a multiple of Hkv) the one KV head its query
//                                         heads read, replicated on N/Hkv ranks (as vLLM does)
//   q/k/v bias              as the rows
//   o_proj [H, Hq D]        columns       the columns of its query heads; o_proj bias: rank 0
//   gate_proj, up_proj      rows          [r I/N, (r+1) I/N)
//   down_proj [H, I]        columns       the same range
//   embed_tokens [V, H]     rows (vocab)  [r Vp, min(V, (r+1) Vp)), Vp = ceil(V / N) rounded
//                                         up to a multiple of kVocabAlign where the last
//                                         rank still holds an id
//   lm_head [V, H]          rows (vocab)  the same range (tied: the embedding shard itself)
//   norms, q_norm, k_norm   replicated
//
// After o_proj and down_proj each rank holds a partial sum: the forward all-reduces it
// before the residual add (every fusion stops at that boundary). The embedding of an id
// outside the rank's range is zero, so an all-reduce also completes the embedding. The
// LM head's [S, Vp] logits are gathered by columns into [S, V].
#pragma once

#include <cstdint>

#include "io/model_config.h"

namespace kestrel {

struct ShardPlan {
  // A rank's vocabulary starts on a chunk of the vocab-parallel sampler (kPlainChunk in
  // backend/cuda/sampling/sampling_plain.h), which then samples each rank's logit columns
  // where they are (docs/parallel.md).
  static constexpr int64_t kVocabAlign = 256;

  int rank = 0;
  int world_size = 1;
  int num_q_heads = 0;     // this rank's, Hq / N
  int q_head_start = 0;    // first global query head
  int num_kv_heads = 0;    // this rank's: Hkv / N, or 1 when replicated
  int kv_head_start = 0;   // first global KV head
  int64_t intermediate = 0;        // I / N
  int64_t intermediate_start = 0;
  int64_t vocab_per_rank = 0;  // Vp (above): rows of this rank's embedding/LM head (the
                               // last rank's trailing rows beyond V are zeros)
  int64_t vocab_start = 0;     // r * Vp

  // The plan for `rank` of `world_size`. Throws kestrel::Error, naming the sizes, when N
  // does not divide the query heads or the MLP width, or when N and the KV heads divide
  // neither way.
  static ShardPlan make(const ModelConfig& config, int rank, int world_size);
};

}  // namespace kestrel
