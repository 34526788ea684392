// EngineLoop: the one thread that owns the LLM while the server runs.
//
// HTTP handler threads never touch the LLM. They queue commands (add a request, abort a
// request) and the engine thread applies them between steps, runs steps while there is
// work, and hands each request's outputs (deltas from its RequestStream: tokens, text,
// stop reasons; a stop string ends a sample right there) to that request's UpdateQueue.
// It also times requests (TTFT, inter-token latency, end-to-end latency) into
// ServerMetrics and publishes a snapshot of the engine's counters for /metrics.
//
// Thread safety: every public method may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kestrel/llm.h"
#include "kestrel/request_output.h"
#include "kestrel/sampling_params.h"
#include "server/metrics.h"

namespace kestrel::server {

using Clock = std::chrono::steady_clock;

// What one engine request got in one step: the samples that changed, each with what the
// step added (OutputKind::kDelta), and the prompt logprobs once (in the update where the
// prompt was computed, when asked for). `error` is set (and nothing else) when the engine
// refused or failed the request; the request is then gone.
struct RequestUpdate {
  int sub = 0;  // the owner's index for this engine request (its prompt)
  std::vector<CompletionOutput> samples;
  std::string error;
  std::vector<TokenLogprobs> prompt_logprobs;  // RequestOutput::prompt_logprobs
  // RequestOutput::num_cached_tokens (prompt tokens served from the prefix cache) as of
  // this step; -1 when the engine sent no output (errors, aborts).
  int num_cached_tokens = -1;
  // With `error`: the engine refused the request itself (its prompt or parameters), as
  // opposed to failing or shutting down.
  bool refused = false;
};

// Where the engine thread leaves updates for one HTTP request (which may own several
// engine requests, one per prompt). One producer (the engine thread), one consumer.
class UpdateQueue {
 public:
  void push(RequestUpdate update);
  // Waits until updates are queued or `timeout` passes; returns (and removes) them all.
  std::vector<RequestUpdate> wait(std::chrono::milliseconds timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<RequestUpdate> updates_;
};

class EngineLoop {
 public:
  // Starts the engine thread. The LLM must outlive the loop and be stepped by no one else
  // until the loop is destroyed.
  EngineLoop(LLM& llm, ServerMetrics& metrics);
  ~EngineLoop();  // stop()
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Queues a request; its updates go to `queue`, tagged with `sub`. `arrival` is when the
  // HTTP request came in (TTFT and latency are measured from it). The caller has
  // validated the prompt and params; if the engine still refuses them, the queue gets an
  // update with `error` set.
  void add(std::string request_id, std::vector<int> prompt, SamplingParams params,
           std::shared_ptr<UpdateQueue> queue, int sub, Clock::time_point arrival);
  // Aborts the request (all samples) and frees its blocks; no more updates for it.
  void abort(std::string request_id);
  // Aborts every request; each owner gets a final update with finish_reason "abort".
  // Requests added afterwards are refused (their queue gets an error update).
  void abort_all();
  // Aborts everything and joins the thread. Idempotent.
  void stop();

  // The engine counters as of the end of the last step.
  LLMStats stats() const;

 private:
  struct Command {
    enum class Kind { kAdd, kAbort, kAbortAll } kind = Kind::kAbort;
    std::string request_id;
    std::vector<int> prompt;
    SamplingParams params;
    std::shared_ptr<UpdateQueue> queue;
    int sub = 0;
    Clock::time_point arrival;
  };
  // Engine-thread bookkeeping for one request.
  struct Entry {
    Entry(RequestStream request, std::shared_ptr<UpdateQueue> updates, int sub_index, int n,
          Clock::time_point arrived)
        : stream(std::move(request)),
          queue(std::move(updates)),
          sub(sub_index),
          finish_reasons(n),
          arrival(arrived) {}
    RequestStream stream;
    std::shared_ptr<UpdateQueue> queue;
    int sub = 0;
    std::vector<std::string> finish_reasons;  // per sample, "" while running
    Clock::time_point arrival;
    Clock::time_point last_token;
    bool got_token = false;
  };

  void run();
  void apply(Command& command);
  void step();
  // Hands the entry's new outputs to its queue; retires it when its request finished.
  void dispatch(std::unordered_map<std::string, Entry>::iterator it, Clock::time_point now);
  void fail_all(const std::string& message);
  // Counts the request as finished with `reason`, records its latency, forgets it.
  void retire(std::unordered_map<std::string, Entry>::iterator it, std::string reason,
              Clock::time_point now);
  void abort_entry(std::unordered_map<std::string, Entry>::iterator it, bool notify);

  LLM& llm_;
  ServerMetrics& metrics_;
  std::unordered_map<std::string, Entry> entries_;  // engine thread only

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Command> commands_;
  bool stopping_ = false;
  bool refusing_ = false;  // after abort_all()
  LLMStats stats_;
  std::thread thread_;
};

}  // namespace kestrel::server
