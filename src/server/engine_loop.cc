#include "server/engine_loop.h"

#include <exception>
#include <optional>
#include <tuple>

#include "core/error.h"
#include "core/logging.h"

namespace kestrel::server {

void UpdateQueue::push(RequestUpdate update) {
  {
    std::lock_guard lock(mu_);
    updates_.push_back(std::move(update));
  }
  cv_.notify_one();
}

std::vector<RequestUpdate> UpdateQueue::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !updates_.empty(); });
  std::vector<RequestUpdate> out;
  out.swap(updates_);
  return out;
}

EngineLoop::EngineLoop(LLM& llm, ServerMetrics& metrics)
    : llm_(llm), metrics_(metrics), stats_(llm.stats()) {
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() { stop(); }

void EngineLoop::add(std::string request_id, std::vector<int> prompt, SamplingParams params,
                     std::shared_ptr<UpdateQueue> queue, int sub, Clock::time_point arrival) {
  Command c;
  c.kind = Command::Kind::kAdd;
  c.request_id = std::move(request_id);
  c.prompt = std::move(prompt);
  c.params = std::move(params);
  c.queue = std::move(queue);
  c.sub = sub;
  c.arrival = arrival;
  {
    std::lock_guard lock(mu_);
    if (stopping_ || refusing_) {
      c.queue->push(RequestUpdate{sub, {}, "the server is shutting down", {}});
      return;
    }
    commands_.push_back(std::move(c));
  }
  cv_.notify_one();
}

void EngineLoop::abort(std::string request_id) {
  {
    std::lock_guard lock(mu_);
    Command c;
    c.kind = Command::Kind::kAbort;
    c.request_id = std::move(request_id);
    commands_.push_back(std::move(c));
  }
  cv_.notify_one();
}

void EngineLoop::abort_all() {
  {
    std::lock_guard lock(mu_);
    Command c;
    c.kind = Command::Kind::kAbortAll;
    commands_.push_back(std::move(c));
    refusing_ = true;
  }
  cv_.notify_one();
}

void EngineLoop::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

LLMStats EngineLoop::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void EngineLoop::run() {
  while (true) {
    std::vector<Command> commands;
    bool stopping = false;
    {
      std::unique_lock lock(mu_);
      if (!llm_.has_unfinished()) {
        cv_.wait(lock, [&] { return !commands_.empty() || stopping_; });
      }
      commands.swap(commands_);
      stopping = stopping_;
    }
    for (Command& c : commands) apply(c);
    if (stopping) {
      // add() refuses requests once stopping_ is set, so every queued one was applied
      // above; abort them with the rest.
      while (!entries_.empty()) abort_entry(entries_.begin(), true);
      std::lock_guard lock(mu_);
      stats_ = llm_.stats();
      return;
    }
    if (llm_.has_unfinished()) step();
    std::lock_guard lock(mu_);
    stats_ = llm_.stats();
  }
}

void EngineLoop::apply(Command& c) {
  switch (c.kind) {
    case Command::Kind::kAdd: {
      const int n = c.params.n;
      // Deltas: each token and piece of text is handed out once.
      c.params.output_kind = OutputKind::kDelta;
      std::optional<RequestStream> stream;
      try {
        stream.emplace(llm_.add_request(std::move(c.prompt), std::move(c.params), c.request_id));
      } catch (const Error& e) {
        RequestUpdate refusal{c.sub, {}, e.what(), {}};
        refusal.refused = true;
        c.queue->push(std::move(refusal));
        metrics_.count_finished("error");
        return;
      }
      entries_.emplace(std::piecewise_construct, std::forward_as_tuple(std::move(c.request_id)),
                       std::forward_as_tuple(std::move(*stream), std::move(c.queue), c.sub, n,
                                             c.arrival));
      return;
    }
    case Command::Kind::kAbort: {
      auto it = entries_.find(c.request_id);
      if (it != entries_.end()) abort_entry(it, false);
      return;
    }
    case Command::Kind::kAbortAll:
      while (!entries_.empty()) abort_entry(entries_.begin(), true);
      return;
  }
}

void EngineLoop::step() {
  try {
    llm_.step();
  } catch (const std::exception& e) {
    KS_LOG_ERROR("engine step failed: {}", e.what());
    fail_all(fmt::format("the engine failed: {}", e.what()));
    return;
  }
  // Counters and metrics are recorded before any client hears of the step, so that a
  // client that got its last token and then reads /metrics finds that token counted.
  {
    std::lock_guard lock(mu_);
    stats_ = llm_.stats();
  }
  const Clock::time_point now = Clock::now();
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    dispatch(it, now);
    it = next;
  }
}

void EngineLoop::dispatch(std::unordered_map<std::string, Entry>::iterator it,
                          Clock::time_point now) {
  Entry& entry = it->second;
  RequestUpdate update;
  update.sub = entry.sub;
  bool new_tokens = false;
  bool finished = false;
  for (RequestOutput& out : entry.stream.take()) {
    for (CompletionOutput& c : out.outputs) {
      const size_t i = static_cast<size_t>(c.index);
      if (i >= entry.finish_reasons.size() || !entry.finish_reasons[i].empty()) continue;
      new_tokens = new_tokens || !c.token_ids.empty();
      entry.finish_reasons[i] = c.finish_reason;
      update.samples.push_back(std::move(c));
    }
    if (!out.prompt_logprobs.empty()) update.prompt_logprobs = std::move(out.prompt_logprobs);
    update.num_cached_tokens = out.num_cached_tokens;
    finished = finished || out.finished;
  }
  if (new_tokens) {
    if (!entry.got_token) {
      metrics_.observe_time_to_first_token(
          std::chrono::duration<double>(now - entry.arrival).count());
      entry.got_token = true;
    } else {
      metrics_.observe_inter_token_latency(
          std::chrono::duration<double>(now - entry.last_token).count());
    }
    entry.last_token = now;
  }
  std::shared_ptr<UpdateQueue> queue = entry.queue;
  if (finished) retire(it, entry.finish_reasons[0], now);
  if (!update.samples.empty() || !update.prompt_logprobs.empty()) queue->push(std::move(update));
}

void EngineLoop::retire(std::unordered_map<std::string, Entry>::iterator it, std::string reason,
                        Clock::time_point now) {
  metrics_.count_finished(reason);
  if (reason != "abort" && reason != "error") {
    metrics_.observe_e2e_latency(std::chrono::duration<double>(now - it->second.arrival).count());
  }
  entries_.erase(it);
}

void EngineLoop::abort_entry(std::unordered_map<std::string, Entry>::iterator it, bool notify) {
  Entry& entry = it->second;
  entry.stream.abort();
  std::shared_ptr<UpdateQueue> queue = entry.queue;
  RequestUpdate update;
  update.sub = entry.sub;
  for (size_t i = 0; i < entry.finish_reasons.size(); ++i) {
    if (!entry.finish_reasons[i].empty()) continue;
    CompletionOutput s;
    s.index = static_cast<int>(i);
    s.finish_reason = "abort";
    update.samples.push_back(std::move(s));
  }
  retire(it, "abort", Clock::now());
  if (notify) queue->push(std::move(update));
}

void EngineLoop::fail_all(const std::string& message) {
  while (!entries_.empty()) {
    auto it = entries_.begin();
    it->second.stream.abort();
    std::shared_ptr<UpdateQueue> queue = it->second.queue;
    const int sub = it->second.sub;
    retire(it, "error", Clock::now());
    queue->push(RequestUpdate{sub, {}, message, {}});
  }
}

}  // namespace kestrel::server
