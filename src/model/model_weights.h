// Loading a decoder's weights into backend memory, in the layout the forward pass uses.
//
// Hugging Face names (prefix "model."):
//   embed_tokens.weight [V, H]; norm.weight [H]; lm_head.weight [V, H] (top level)
//   layers.{i}.input_layernorm.weight [H], post_attention_layernorm.weight [H]
//   layers.{i}.self_attn.{q,k,v}_proj.weight [Hq D | Hkv D | Hkv D, H] (+ .bias when
//     config.attention_bias), o_proj.weight [H, Hq D] (+ .bias, see ArchitectureSpec),
//     q_norm.weight / k_norm.weight [D] (config.qk_norm)
//   layers.{i}.mlp.{gate,up}_proj.weight [I, H], down_proj.weight [H, I]
// q/k/v are packed into one qkv weight [(Hq + 2 Hkv) D, H] (rows q, then k, then v) and
// gate/up into one gate_up weight [2I, H] (gate rows first), so each is one GEMM. Tied
// embeddings (config.tie_word_embeddings) use embed_tokens as the LM head, as transformers
// does, whether or not the file also has lm_head.weight.
//
// Weights are converted to backend.compute_dtype() at upload.
//
// Under tensor parallelism each rank loads only its shard (model/shard_plan.h): every
// tensor is cut in the memory-mapped file before it is converted or uploaded, so a rank
// never holds more than its part of a weight. Sizes below are this rank's: Hq, Hkv, I and
// Vp = plan.num_q_heads, plan.num_kv_heads, plan.intermediate, plan.vocab_per_rank (the whole
// model, with Vp = V, for a plan of one rank).
#pragma once

#include <cstddef>
#include <vector>

#include "backend/backend.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "model/architecture.h"
#include "model/shard_plan.h"

namespace kestrel {

struct LayerWeights {
  Tensor input_norm;  // [H]
  Tensor qkv;         // [(Hq + 2 Hkv) D, H]
  Tensor qkv_bias;    // [(Hq + 2 Hkv) D] or undefined
  Tensor q_norm;      // [D] or undefined
  Tensor k_norm;      // [D] or undefined
  Tensor o_proj;      // [H, Hq D]
  Tensor o_bias;      // [H] or undefined; under TP only on rank 0 (added once to the sum)
  Tensor post_norm;   // [H]
  Tensor gate_up;     // [2I, H]
  Tensor down;        // [H, I]
};

struct ModelWeights {
  Tensor embed;  // [Vp, H]: vocab rows [vocab_start, vocab_start + Vp), zeros past V
  std::vector<LayerWeights> layers;
  Tensor final_norm;  // [H]
  Tensor lm_head;     // [Vp, H]; the same tensor as embed when tied
  size_t bytes = 0;   // backend memory this rank holds, each tensor counted once
};

// This rank's shard of every weight, as `plan` (made from the same config) cuts them.
// Throws kestrel::Error naming the tensor when one is missing, has the wrong (full-model)
// shape, or is not F32/F16/BF16.
ModelWeights load_model_weights(const WeightStore& store, const ModelConfig& config,
                                const ArchitectureSpec& arch, Backend& backend,
                                const ShardPlan& plan);
// The whole model: the plan of one rank.
ModelWeights load_model_weights(const WeightStore& store, const ModelConfig& config,
                                const ArchitectureSpec& arch, Backend& backend);

}  // namespace kestrel
