// Background responses of the Responses API (`background: true`, OpenAI's background mode):
// the request is answered at once with the response "queued", and one worker thread runs
// every such response to its end, keeping its state in the response store: "in_progress"
// once its engine request is queued, then "completed", "incomplete", "failed" or
// "cancelled". GET /v1/responses/{id} polls it; POST /v1/responses/{id}/cancel cancels it
// (cancel()); DELETE cancels it, then removes it.
//
// One thread for all of them, so that a client starting many cannot start as many threads:
// it polls each run's Generation without waiting and sleeps briefly when none had news (a
// finished response is stored within a few milliseconds of its last token). Each running
// response counts as in flight (server_state.h): a draining server waits for them as for any
// request, then aborts their engine requests, which ends them "incomplete".
//
// Streamed (`background` with `stream`): the worker also keeps the response's events in an
// EventLog, which the request's stream reads from the start and a later
// GET /v1/responses/{id}?stream=true&starting_after=N from event N + 1 on (a client that
// lost its connection resumes), while the response runs; the run goes on without readers.
//
// Thread safety: every method may be called from any thread; the worker alone drives the runs.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "server/response_run.h"
#include "server/server_state.h"

namespace kestrel::server {

// A streamed background response's events in order (event i has sequence_number i), until
// it ends. Thread safety: every method locks.
class EventLog {
 public:
  void append(std::vector<nlohmann::ordered_json> events);
  void end();
  // Waits up to `timeout` for events from index `next` on; returns them, and whether the log
  // has ended with nothing after them.
  std::pair<std::vector<nlohmann::ordered_json>, bool> read(size_t next,
                                                            std::chrono::milliseconds timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<nlohmann::ordered_json> events_;
  bool ended_ = false;
};

class BackgroundResponses {
 public:
  explicit BackgroundResponses(ServerState& state);
  ~BackgroundResponses();  // stop()
  BackgroundResponses(const BackgroundResponses&) = delete;
  BackgroundResponses& operator=(const BackgroundResponses&) = delete;

  // Takes `run`, a background response that is stored: stores it "queued", and the worker
  // starts it. The response as stored is the request's answer.
  nlohmann::ordered_json start(std::unique_ptr<ResponseRun> run);
  // The same for a streamed one: its events go to the log returned, from response.created
  // ("queued") on.
  std::shared_ptr<EventLog> start_streamed(std::unique_ptr<ResponseRun> run);
  // The event log of streamed background response `id` while it runs; null otherwise.
  std::shared_ptr<EventLog> log(const std::string& id);
  // True when response `id` was running: it is cancelled, and its "cancelled" state is in the
  // store when this returns. False for any other id (finished, never background, unknown).
  bool cancel(const std::string& id);
  // Cancels what still runs and ends the worker. Later start() calls are refused (the
  // server is going away: a 503).
  void stop();

 private:
  struct Job {
    std::unique_ptr<ResponseRun> run;
    std::unique_ptr<InflightGuard> inflight;
    bool started = false;  // its engine request is queued
    bool ended = false;    // done, cancelled or failed: stored as it ended
    std::shared_ptr<EventLog> log;  // streamed: its events
  };
  void enqueue(Job job);
  void work();
  // One pass over the worker's runs; true when any had news. `cancels` are the ids asked to
  // stop (every run when stopping).
  bool step(std::vector<Job>& jobs, const std::unordered_set<std::string>& cancels,
            bool stopping);

  ServerState& state_;
  std::mutex mu_;
  // To the worker: a new run, a cancel, stop; to cancel(): a run ended.
  std::condition_variable cv_;
  std::vector<Job> incoming_;               // started, not yet the worker's
  std::unordered_set<std::string> running_;  // ids of every run not ended
  std::unordered_map<std::string, std::shared_ptr<EventLog>> logs_;  // streamed runs not ended
  std::unordered_set<std::string> cancels_;  // ids asked to cancel, not yet seen by the worker
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace kestrel::server
