// The decoder architectures the model implements, and how they differ. All four are the
// same pre-norm decoder (RMSNorm, GQA attention with RoPE, SwiGLU MLP); what varies is
// read from config.json by io (ModelConfig::qk_norm, ::attention_bias) plus the few facts
// below. Adding a Llama-like architecture is one row in architecture.cc.
#pragma once

#include <string>
#include <string_view>

namespace kestrel {

struct ArchitectureSpec {
  std::string_view name;  // config.json "architectures"[0]
  // Prefix of the decoder's tensors ("model." -> "model.layers.0.self_attn.q_proj.weight").
  std::string_view prefix;
  // o_proj carries a bias when config.attention_bias is set (Llama, Qwen3). In Qwen2,
  // attention_bias means q/k/v only.
  bool o_proj_bias_with_attention_bias;
};

// Throws kestrel::Error naming `architecture` and the supported list when unknown.
const ArchitectureSpec& find_architecture(const std::string& architecture);

}  // namespace kestrel
