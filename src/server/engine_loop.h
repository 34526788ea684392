// EngineLoop: the one thread that owns the LLMEngine while the server runs.
//
// HTTP handler threads never touch the engine. They queue commands (add a request, abort a
// request or one of its samples) and the engine thread applies them between steps, runs
// steps while there is work, and hands each request's new tokens to that request's
// UpdateQueue. It also times requests (TTFT, inter-token latency, end-to-end latency) into
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

#include "engine/llm_engine.h"
#include "kestrel/request_output.h"
#include "kestrel/sampling_params.h"
#include "server/metrics.h"

namespace kestrel::server {

using Clock = std::chrono::steady_clock;

// Tokens one sample generated since the last update.
struct SampleUpdate {
  int sample_index = 0;
  std::vector<int> token_ids;
  std::vector<TokenLogprobs> logprobs;  // one per token when the request asked for them
  std::string finish_reason;            // "" while the sample runs
};

// What one engine request got in one step. `error` is set (and nothing else) when the
// engine refused or failed the request; the request is then gone.
struct RequestUpdate {
  int sub = 0;  // the owner's index for this engine request (its prompt)
  std::vector<SampleUpdate> samples;
  std::string error;
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
  // Starts the engine thread. The engine must outlive the loop and be used by no one else
  // until the loop is destroyed.
  EngineLoop(LLMEngine& engine, ServerMetrics& metrics);
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
  // Finishes one sample: the server saw a stop string in it. Counted as "stop".
  void finish_sample(std::string request_id, int sample_index);
  // Aborts every request; each owner gets a final update with finish_reason "abort".
  // Requests added afterwards are refused (their queue gets an error update).
  void abort_all();
  // Aborts everything and joins the thread. Idempotent.
  void stop();

  // The engine counters as of the end of the last step.
  EngineStats stats() const;

 private:
  struct Command {
    enum class Kind { kAdd, kAbort, kFinishSample, kAbortAll } kind = Kind::kAbort;
    std::string request_id;
    std::vector<int> prompt;
    SamplingParams params;
    std::shared_ptr<UpdateQueue> queue;
    int sub = 0;
    int sample_index = 0;
    Clock::time_point arrival;
  };
  // Engine-thread bookkeeping for one request.
  struct Entry {
    std::shared_ptr<UpdateQueue> queue;
    int sub = 0;
    std::vector<size_t> delivered;            // tokens handed out, per sample
    std::vector<std::string> finish_reasons;  // per sample, "" while running
    Clock::time_point arrival;
    Clock::time_point last_token;
    bool got_token = false;
  };

  void run();
  void apply(Command& command);
  void step();
  void dispatch(RequestOutput& output, Clock::time_point now);
  void fail_all(const std::string& message);
  // Counts the request as finished with `reason`, records its latency, forgets it.
  void retire(std::unordered_map<std::string, Entry>::iterator it, std::string reason,
              Clock::time_point now);
  void abort_entry(std::unordered_map<std::string, Entry>::iterator it, bool notify);

  LLMEngine& engine_;
  ServerMetrics& metrics_;
  std::unordered_map<std::string, Entry> entries_;  // engine thread only

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Command> commands_;
  bool stopping_ = false;
  bool refusing_ = false;  // after abort_all()
  EngineStats stats_;
  std::thread thread_;
};

}  // namespace kestrel::server
