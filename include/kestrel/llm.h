// LLM: the offline API. Load a Hugging Face model directory once, then generate for a
// batch of prompts; the engine batches them continuously.
//
//   kestrel::LLM llm("/models/Qwen3-0.6B", {.device = "cpu"});
//   kestrel::SamplingParams params = llm.default_sampling_params();
//   params.max_tokens = 64;
//   auto outputs = llm.generate({"Hello, my name is"}, params);
//
// Requests one at a time, as they come: add_request() returns a RequestStream
// (request_stream.h); generate, generate_streaming, the server and the bench are written on
// it.
//
// Not thread-safe: use one LLM (and its streams) from one thread (the server runs its own
// engine loop).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kestrel/engine_config.h"
#include "kestrel/llm_stats.h"
#include "kestrel/request_output.h"
#include "kestrel/request_stream.h"
#include "kestrel/sampling_params.h"

namespace kestrel {

class Tokenizer;

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
  // half characters, nothing that may still turn out to be a stop string). Needs a
  // tokenizer, params.n == 1 and params.detokenize (else kestrel::Error). Returns the
  // finished output (cumulative), as generate() gives it.
  RequestOutput generate_streaming(const std::vector<int>& prompt, const SamplingParams& params,
                                   const std::function<void(const std::string&)>& on_text);

  // Queues one request; its outputs come through the returned stream, shaped by
  // params.output_kind. `request_id` empty: a fresh one is made. Throws kestrel::Error,
  // with nothing queued, when the id is in use, the prompt or params are invalid, or stop
  // strings come without a tokenizer.
  RequestStream add_request(std::vector<int> prompt, SamplingParams params,
                            std::string request_id = "");
  // Runs one engine step and hands its outputs to their streams (a sample that reached a
  // stop string is ended in the engine here). False when there was nothing to do. Throws
  // kestrel::Error when the step fails; the requests stay queued.
  bool step();
  // Whether a request added is unfinished (queued, running, or not yet ended by step()).
  bool has_unfinished() const;

  // Renders chat messages ([{"role": ..., "content": ...}, ...]) with the model's chat
  // template, as transformers' apply_chat_template does. `extra` holds further template
  // variables (tools, enable_thinking, ...). Content given as a list of text parts is
  // joined into one string, as vLLM does. Throws kestrel::Error when a message is not an
  // object with a string role, the model has no chat template or the template fails (the
  // message names the line and column). continue_final_message (transformers' and vLLM's
  // option; not with add_generation_prompt) ends the prompt inside the final message, so
  // that the model continues it. `chat_template`, when not empty, is Jinja source used
  // instead of the model's template.
  std::string apply_chat_template(
      const nlohmann::ordered_json& messages, bool add_generation_prompt = true,
      const nlohmann::ordered_json& extra = nlohmann::ordered_json::object(),
      bool continue_final_message = false, const std::string& chat_template = "") const;

  // The chat template in use (EngineConfig::chat_template's, else tokenizer_config.json's)
  // as Jinja source; empty when there is none.
  const std::string& chat_template_source() const;

  // SamplingParams with generation_config.json's defaults applied.
  SamplingParams default_sampling_params() const;
  // nullptr when the model directory has no tokenizer.
  const Tokenizer* tokenizer() const;
  // Empty while the engine can run; otherwise why it never will again (a tensor-parallel
  // rank died or a collective failed). Any thread: a server polls it and stops.
  std::string fatal_error() const;
  // Counters and timers of the scheduler, the KV cache and the model runner.
  LLMStats stats() const;
  // fp8 KV cache: the values clamped so far, read from the device now (waits for the steps
  // in flight; LLMStats::kv_cache_clamped is the count as of the last such read). 0 for
  // another cache.
  int64_t kv_cache_clamped();
  // The backend's memory now (on the CPU: the host's).
  DeviceMemory device_memory() const;
  int vocab_size() const;
  int max_model_len() const;
  // "cpu" or "cuda".
  std::string device() const;
  // Bytes of weights and KV cache in the backend's memory.
  size_t weight_bytes() const;
  size_t kv_cache_bytes() const;

  // Benchmark aid: the device time of one decode forward (no sampling) of `batch` sequences
  // of `context_len` tokens each, averaged over `iters` back-to-back runs, in seconds. It
  // writes no KV. Call only between steps. Throws kestrel::Error for sizes beyond the limits.
  double time_decode_forward(int batch, int context_len, int iters);
  // Turns an attached profiler's capture on or off (ncu --profile-from-start off), so that a
  // benchmark can profile chosen steps only. No-op where there is none.
  void set_profiler_capture(bool on);

 private:
  friend class RequestStream;
  // RequestStream::abort.
  void abort(RequestState& state);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel
