#include "server/background_responses.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/logging.h"
#include "server/api_error.h"
#include "server/response_store.h"

namespace kestrel::server {

using ojson = nlohmann::ordered_json;

namespace {

// How long the worker sleeps when no run had news: the delay between a response's last
// token and its stored end, at most.
constexpr std::chrono::milliseconds kIdleWait{2};

}  // namespace

void EventLog::append(std::vector<ojson> events) {
  if (events.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (ojson& e : events) events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

void EventLog::end() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ended_ = true;
  }
  cv_.notify_all();
}

std::pair<std::vector<ojson>, bool> EventLog::read(size_t next, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return ended_ || events_.size() > next; });
  std::vector<ojson> out;
  for (size_t i = next; i < events_.size(); ++i) out.push_back(events_[i]);
  return {std::move(out), ended_};
}

BackgroundResponses::BackgroundResponses(ServerState& state)
    : state_(state), worker_([this] { work(); }) {}

BackgroundResponses::~BackgroundResponses() { stop(); }

ojson BackgroundResponses::start(std::unique_ptr<ResponseRun> run) {
  ojson answer = run->builder().response();
  answer["status"] = "queued";
  Job job;
  job.run = std::move(run);
  enqueue(std::move(job));
  return answer;
}

std::shared_ptr<EventLog> BackgroundResponses::start_streamed(std::unique_ptr<ResponseRun> run) {
  auto log = std::make_shared<EventLog>();
  log->append(run->builder().start_queued());  // at once, before the worker takes it
  Job job;
  job.run = std::move(run);
  job.log = log;
  enqueue(std::move(job));
  return log;
}

void BackgroundResponses::enqueue(Job job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) throw ApiError(503, "the server is shutting down", "", "server_error");
    job.inflight = std::make_unique<InflightGuard>(state_);
    job.run->store_as("queued");
    running_.insert(job.run->id());
    if (job.log) logs_[job.run->id()] = job.log;
    incoming_.push_back(std::move(job));
  }
  cv_.notify_all();
}

std::shared_ptr<EventLog> BackgroundResponses::log(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = logs_.find(id);
  return it == logs_.end() ? nullptr : it->second;
}

bool BackgroundResponses::cancel(const std::string& id) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!running_.contains(id)) return false;
  cancels_.insert(id);
  cv_.notify_all();
  cv_.wait(lock, [&] { return !running_.contains(id); });
  return true;
}

void BackgroundResponses::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void BackgroundResponses::work() {
  std::vector<Job> jobs;
  for (;;) {
    std::unordered_set<std::string> cancels;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (jobs.empty()) cv_.wait(lock, [&] { return stopping_ || !incoming_.empty(); });
      for (Job& job : incoming_) jobs.push_back(std::move(job));
      incoming_.clear();
      cancels.swap(cancels_);
      stopping = stopping_;
    }
    if (stopping && jobs.empty()) return;
    const bool news = step(jobs, cancels, stopping);
    // Ended runs go (a cancelled one's engine request is aborted as its Generation goes),
    // then cancel() hears of them.
    std::vector<std::string> ended;
    std::erase_if(jobs, [&](const Job& job) {
      if (!job.ended) return false;
      if (job.log) job.log->end();
      ended.push_back(job.run->id());
      return true;
    });
    if (!ended.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      for (const std::string& id : ended) {
        running_.erase(id);
        logs_.erase(id);
      }
    }
    cv_.notify_all();
    if (!news && ended.empty()) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, kIdleWait,
                   [&] { return stopping_ || !incoming_.empty() || !cancels_.empty(); });
    }
  }
}

bool BackgroundResponses::step(std::vector<Job>& jobs,
                               const std::unordered_set<std::string>& cancels, bool stopping) {
  bool news = false;
  for (Job& job : jobs) {
    ResponseRun& run = *job.run;
    try {
      if (stopping || cancels.contains(run.id())) {
        if (!run.gen().done()) {
          KS_LOG_DEBUG("{}: background response cancelled", run.id());
          run.cancel();
        }
        job.ended = true;
        continue;
      }
      if (!job.started) {
        run.gen().start();
        run.store_as("in_progress");
        if (job.log) job.log->append(run.builder().in_progress());
        job.started = true;
        news = true;
      }
      ResponseBuilder::Events events = run.poll(std::chrono::milliseconds(0));
      if (!events.empty()) news = true;
      if (job.log) job.log->append(std::move(events));
      job.ended = run.gen().done();
    } catch (const std::exception& e) {
      // Nothing of one response may stop the others: it ends "failed".
      KS_LOG_ERROR("{}: background response failed: {}", run.id(), e.what());
      job.ended = true;
      try {
        if (job.log) {
          job.log->append(run.fail(e.what()));
        } else {
          (void)run.fail(e.what());
        }
      } catch (const std::exception& again) {
        KS_LOG_ERROR("{}: its failure could not be stored: {}", run.id(), again.what());
      }
    }
  }
  return news;
}

}  // namespace kestrel::server
