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
#pragma once

#include <cstddef>
#include <vector>

#include "backend/backend.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "model/architecture.h"

namespace kestrel {

struct LayerWeights {
  Tensor input_norm;  // [H]
  Tensor qkv;         // [(Hq + 2 Hkv) D, H]
  Tensor qkv_bias;    // [(Hq + 2 Hkv) D] or undefined
  Tensor q_norm;      // [D] or undefined
  Tensor k_norm;      // [D] or undefined
  Tensor o_proj;      // [H, Hq D]
  Tensor o_bias;      // [H] or undefined
  Tensor post_norm;   // [H]
  Tensor gate_up;     // [2I, H]
  Tensor down;        // [H, I]
};

struct ModelWeights {
  Tensor embed;  // [V, H]
  std::vector<LayerWeights> layers;
  Tensor final_norm;  // [H]
  Tensor lm_head;     // [V, H]; the same tensor as embed when tied
  size_t bytes = 0;   // backend memory held, each tensor counted once
};

// Throws kestrel::Error naming the tensor when one is missing, has the wrong shape, or is
// not F32/F16/BF16.
ModelWeights load_model_weights(const WeightStore& store, const ModelConfig& config,
                                const ArchitectureSpec& arch, Backend& backend);

}  // namespace kestrel
