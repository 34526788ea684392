// Writes a Qwen3 model directory with random weights: for speed tests in the real shapes and
// for plumbing tests, where the numbers do not matter but the files must look like HF's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/dtype.h"

namespace kestrel {

// Presets:
//   "tiny":       vocab 151936 (the Qwen3 tokenizer's, so text round-trips), hidden 64,
//                 2 layers, 4 heads, 2 KV heads, head_dim 32, intermediate 192, tied, bf16.
//   "qwen3-0.6b": the real Qwen3-0.6B shape: 28 layers, hidden 1024, 16 heads, 8 KV heads,
//                 head_dim 128, intermediate 3072, vocab 151936, tied, bf16 (1.2 GB).
//   "qwen3-8b":   Qwen3-8B's shape: 36 layers, hidden 4096, 32 heads, 8 KV heads of 128,
//                 intermediate 12288, vocab 151936, untied, bf16 (16.4 GB).
//   "qwen3-32b":  Qwen3-32B's shape: 64 layers, hidden 5120, 64 heads, 8 KV heads of 128,
//                 intermediate 25600, vocab 151936, untied, bf16 (65.5 GB).
// All: max_position_embeddings 40960, rope_theta 1e6, rms_norm_eps 1e-6 (Qwen3's).
// A field left at 0 / unset takes the preset's value; any other value overrides it.
struct RandomModelSpec {
  std::string preset = "tiny";
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int max_position_embeddings = 0;
  double rope_theta = 0;
  double rms_norm_eps = 0;
  std::optional<bool> tie_word_embeddings;
  std::optional<DType> dtype;  // kBF16, kF16 or kF32
  uint64_t seed = 0;
};

// The spec with every field filled from its preset. Throws kestrel::Error for an unknown
// preset, a non-positive size, heads not divisible by KV heads, or a non-float dtype.
RandomModelSpec resolve_random_model_spec(const RandomModelSpec& spec);

// Writes into out_dir (created if needed):
//   config.json            as transformers writes Qwen3's (architectures Qwen3ForCausalLM,
//                          model_type qwen3, torch_dtype, rope_theta, rope_scaling null, ...)
//   generation_config.json Qwen3's (bos 151643, eos [151645, 151643], temperature 0.6,
//                          top_k 20, top_p 0.95, do_sample true); with a vocabulary too small
//                          for those ids, bos = eos = pad = vocab_size - 1
//   model.safetensors      HF tensor names; matrices ~N(0, 0.02^2), norm weights 1 + ~N(0,
//                          0.05^2); lm_head.weight only when untied. Deterministic in `seed`
//                          (whatever the thread count), streamed tensor by tensor.
//   tokenizer.json (required) and tokenizer_config.json (if present) copied from
//                          tokenizer_dir when it is not empty.
// Throws kestrel::Error when a file cannot be written, tokenizer_dir lacks tokenizer.json, or
// the weights would not fit on the disk (or their largest tensor in memory); those are
// checked before anything is written.
void write_random_model(const RandomModelSpec& spec, const std::string& out_dir,
                        const std::string& tokenizer_dir);

}  // namespace kestrel
