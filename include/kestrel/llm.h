// LLM: the offline API. Load a Hugging Face model directory once, then generate for a
// batch of prompts; the engine batches them continuously.
//
//   kestrel::LLM llm("/models/Qwen3-0.6B", {.device = "cpu"});
//   kestrel::SamplingParams params = llm.default_sampling_params();
//   params.max_tokens = 64;
//   auto outputs = llm.generate({"Hello, my name is"}, params);
//
// Not thread-safe: use one LLM from one thread (the server runs its own engine loop).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kestrel/engine_config.h"
#include "kestrel/request_output.h"
#include "kestrel/sampling_params.h"

namespace kestrel {

class LLMEngine;
class ModelRunner;
class Tokenizer;

struct EngineMetrics {
  int num_kv_blocks = 0;
  int block_size = 0;
  double kv_cache_usage = 0.0;         // [0, 1]
  double prefix_cache_hit_rate = 0.0;  // [0, 1], over prompt tokens looked up
  int64_t num_preemptions = 0;
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  int64_t computed_tokens = 0;  // including recomputation after preemption
};

class LLM {
 public:
  // Loads the model (config.json, safetensors, tokenizer when present) and sizes the KV
  // cache. Throws kestrel::Error naming the problem for bad files or configuration.
  // With config.tensor_parallel_size N > 1 the model is split over N ranks (worker.h: the
  // program's main() must start with run_worker_if_spawned()). With config.tp_rendezvous,
  // the process is one a launcher started: on ranks >= 1 the constructor never returns (the
  // process serves rank 0's steps, then exits).
  explicit LLM(const std::string& model_dir, const EngineConfig& config = {});
  ~LLM();
  LLM(const LLM&) = delete;
  LLM& operator=(const LLM&) = delete;

  // One output per prompt, in input order. Throws kestrel::Error (before running anything)
  // when a prompt or parameter is invalid. `params` has one entry, or one per prompt.
  std::vector<RequestOutput> generate(const std::vector<std::vector<int>>& prompts,
                                      const std::vector<SamplingParams>& params,
                                      bool progress = true);
  std::vector<RequestOutput> generate(const std::vector<std::vector<int>>& prompts,
                                      const SamplingParams& params, bool progress = true);
  // Text prompts (needs tokenizer.json in the model directory). Outputs carry text.
  std::vector<RequestOutput> generate(const std::vector<std::string>& prompts,
                                      const SamplingParams& params, bool progress = true);

  // One request, calling on_text with each new piece of text as soon as it is final (no
  // half characters). Needs a tokenizer. Returns the finished output.
  RequestOutput generate_streaming(const std::vector<int>& prompt, const SamplingParams& params,
                                   const std::function<void(const std::string&)>& on_text);

  // Renders chat messages ([{"role": ..., "content": ...}, ...]) with the model's chat
  // template, as transformers' apply_chat_template does. `extra` holds further template
  // variables (tools, enable_thinking, ...). Throws kestrel::Error when the model has no
  // chat template or the template fails (the message names the line and column).
  std::string apply_chat_template(
      const nlohmann::ordered_json& messages, bool add_generation_prompt = true,
      const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  // SamplingParams with generation_config.json's defaults applied.
  SamplingParams default_sampling_params() const;
  // nullptr when the model directory has no tokenizer.
  const Tokenizer* tokenizer() const;
  // Empty while the engine can run; otherwise why it never will again (a tensor-parallel
  // rank died or a collective failed). Any thread: a server polls it and stops.
  std::string fatal_error() const;
  LLMEngine& engine();
  // The model runner under the engine (benchmarks read its timers).
  ModelRunner& runner();
  EngineMetrics metrics() const;
  int vocab_size() const;
  int max_model_len() const;
  // "cpu" or "cuda".
  std::string device() const;
  // Bytes of weights and KV cache in the backend's memory.
  size_t weight_bytes() const;
  size_t kv_cache_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel
