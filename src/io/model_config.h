// The parts of a Hugging Face config.json and generation_config.json the engine uses.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace kestrel {

// Reads and parses a JSON file. Throws kestrel::Error naming the file when it is missing,
// and the byte position when it is malformed.
nlohmann::json read_json_file(const std::string& path);

// RoPE scaling, from either `rope_scaling` (transformers 4) or `rope_parameters`
// (transformers 5). type is one of "default", "linear", "dynamic", "yarn", "llama3";
// anything else is rejected at load with an error naming it.
struct RopeScaling {
  std::string type = "default";
  double factor = 1.0;
  // yarn, llama3, dynamic: context length the model was trained with.
  std::optional<int> original_max_position_embeddings;
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  std::optional<double> mscale;
  std::optional<double> mscale_all_dim;
  std::optional<double> attention_factor;
  // yarn (transformers >= 4.56): whether the correction range is floored/ceiled to integers.
  bool truncate = true;
};

struct ModelConfig {
  std::string architecture;  // "Qwen3ForCausalLM", "Qwen2ForCausalLM", "LlamaForCausalLM",
                             // "MistralForCausalLM"
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  // config's head_dim; when absent: Qwen3 128 (transformers' default), Qwen2 and Llama
  // hidden_size / num_attention_heads.
  int head_dim = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  int max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;     // bias on q/k/v projections (Qwen2: true)
  bool qk_norm = false;            // per-head RMSNorm on q and k (Qwen3: true)
  DType dtype = DType::kBF16;      // torch_dtype / dtype
  std::vector<int> eos_token_ids;  // from config.json (int or list); may be empty
  std::optional<int> bos_token_id;
  // Mistral's sliding_window: each query attends to the last this many positions; 0: all.
  // Not implemented: the runner serves at most this many tokens a sequence, where the window
  // changes nothing (model_runner.cc).
  int sliding_window = 0;
};

// Parses <model_dir>/config.json. Throws kestrel::Error for a missing file, malformed JSON,
// an unsupported architecture, missing or inconsistent fields (heads not dividing, etc.)
// or an unknown rope type.
ModelConfig load_model_config(const std::string& model_dir);
ModelConfig parse_model_config(const nlohmann::json& j);

// generation_config.json: defaults a request inherits when it sets nothing.
struct GenerationDefaults {
  std::optional<float> temperature;
  std::optional<int> top_k;
  std::optional<float> top_p;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  std::optional<int> max_new_tokens;
  std::vector<int> eos_token_ids;  // int or list
  std::optional<int> bos_token_id;
  std::optional<bool> do_sample;  // HF: false means greedy, sampling fields unused
};

// Reads <model_dir>/generation_config.json if present (all fields empty when absent).
// Throws kestrel::Error when it exists but is malformed.
GenerationDefaults load_generation_config(const std::string& model_dir);

}  // namespace kestrel
