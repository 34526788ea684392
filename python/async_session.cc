#include "async_session.h"

#include <chrono>
#include <string>

#include "core/error.h"

namespace kestrel::python {

AsyncSession::AsyncSession(std::shared_ptr<EngineHandle> engine) : engine_(std::move(engine)) {
  engine_->claim();
  loop_ = std::make_unique<server::EngineLoop>(engine_->llm(), metrics_);
}

AsyncSession::~AsyncSession() { shutdown(); }

void AsyncSession::add(int key, std::vector<int> prompt, SamplingParams params) {
  KS_CHECK(key >= 0, "request key must be non-negative, got {}", key);
  params.validate(engine_->llm().vocab_size());
  KS_CHECK(!prompt.empty(), "the prompt is empty");
  std::lock_guard lock(mu_);
  KS_CHECK(loop_ != nullptr, "the AsyncLLM was shut down");
  loop_->add(std::to_string(key), std::move(prompt), std::move(params), updates_, key,
             server::Clock::now());
}

void AsyncSession::abort(int key) {
  std::lock_guard lock(mu_);
  if (loop_ != nullptr) loop_->abort(std::to_string(key));
}

std::vector<server::RequestUpdate> AsyncSession::wait(int timeout_ms) {
  return updates_->wait(std::chrono::milliseconds(timeout_ms));
}

void AsyncSession::shutdown() {
  std::unique_ptr<server::EngineLoop> loop;
  {
    std::lock_guard lock(mu_);
    loop = std::move(loop_);
  }
  if (loop == nullptr) return;
  loop->stop();  // aborts what runs; each owner gets its "abort"
  loop.reset();
  engine_->release();
}

}  // namespace kestrel::python
