// BatchSession: LLM::generate, one engine step per call, so that the caller (the Python
// layer) regains control between steps to draw progress, take Ctrl-C and abort.
//
// Outputs are those of LLM::generate for the same prompts and params: the same requests
// (kFinalOnly RequestStreams, text and stop strings from the LLM's output processor).
// tests/python compares the tokens with the CLI's, which runs LLM::generate.
//
// Not thread-safe: one thread uses a session at a time; the engine itself is guarded by the
// handle's mutex, which step() and abort() take.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "engine_handle.h"
#include "kestrel/request_output.h"
#include "kestrel/request_stream.h"
#include "kestrel/sampling_params.h"

namespace kestrel::python {

class BatchSession {
 public:
  // Claims the engine and queues every prompt. Throws kestrel::Error, with nothing left
  // queued, when a prompt or its params are invalid (the messages of LLM::generate) or the
  // engine is claimed. `params` has one entry, or one per prompt.
  BatchSession(std::shared_ptr<EngineHandle> engine, const std::vector<std::vector<int>>& prompts,
               const std::vector<SamplingParams>& params);
  // Aborts what is unfinished.
  ~BatchSession();
  BatchSession(const BatchSession&) = delete;
  BatchSession& operator=(const BatchSession&) = delete;

  // Runs one engine step; returns the requests that finished in it, with their prompt
  // index. Throws kestrel::Error when the engine fails (a dead tensor-parallel rank).
  std::vector<std::pair<size_t, RequestOutput>> step();
  bool done() const { return pending_.empty(); }
  size_t num_prompts() const { return num_prompts_; }
  // Aborts the unfinished requests and gives the engine back; idempotent.
  void abort();
  // Prompt and generated tokens per second in the last step (for the progress bar).
  double prefill_tps() const { return prefill_tps_; }
  double decode_tps() const { return decode_tps_; }

 private:
  std::shared_ptr<EngineHandle> engine_;
  std::vector<std::pair<size_t, RequestStream>> pending_;  // unfinished: prompt index, stream
  size_t num_prompts_ = 0;
  bool claimed_ = false;
  double prefill_tps_ = 0.0;
  double decode_tps_ = 0.0;
};

}  // namespace kestrel::python
