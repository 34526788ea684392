#include "batch_session.h"

#include <chrono>

#include "core/error.h"

namespace kestrel::python {

BatchSession::BatchSession(std::shared_ptr<EngineHandle> engine,
                           const std::vector<std::vector<int>>& prompts,
                           const std::vector<SamplingParams>& params)
    : engine_(std::move(engine)), num_prompts_(prompts.size()) {
  KS_CHECK(params.size() == 1 || params.size() == prompts.size(),
           "generate: {} sampling params for {} prompts (give one, or one per prompt)",
           params.size(), prompts.size());
  engine_->claim();
  claimed_ = true;
  std::lock_guard<std::mutex> lock(engine_->mutex());
  try {
    for (size_t i = 0; i < prompts.size(); ++i) {
      SamplingParams p = params.size() == 1 ? params[0] : params[i];
      p.output_kind = OutputKind::kFinalOnly;  // only finished requests are returned
      try {
        pending_.emplace_back(i, engine_->llm().add_request(prompts[i], std::move(p)));
      } catch (const Error& e) {
        throw_error("prompt {}: {}", i, e.what());
      }
    }
  } catch (...) {
    pending_.clear();  // the streams abort their requests
    engine_->release();
    claimed_ = false;
    throw;
  }
}

BatchSession::~BatchSession() { abort(); }

void BatchSession::abort() {
  if (!pending_.empty()) {
    std::lock_guard<std::mutex> lock(engine_->mutex());
    pending_.clear();  // the streams abort their requests
  }
  if (claimed_) engine_->release();
  claimed_ = false;
}

std::vector<std::pair<size_t, RequestOutput>> BatchSession::step() {
  std::vector<std::pair<size_t, RequestOutput>> finished;
  if (pending_.empty()) return finished;
  std::lock_guard<std::mutex> lock(engine_->mutex());
  LLM& llm = engine_->llm();
  const LLMStats before = llm.stats();
  const auto t0 = std::chrono::steady_clock::now();
  llm.step();
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const LLMStats after = llm.stats();
  std::erase_if(pending_, [&](std::pair<size_t, RequestStream>& p) {
    for (RequestOutput& out : p.second.take()) finished.emplace_back(p.first, std::move(out));
    return p.second.finished();
  });
  const double computed = double(after.computed_tokens - before.computed_tokens);
  const double sampled = double(after.generation_tokens - before.generation_tokens);
  prefill_tps_ = dt > 0 ? (computed - sampled) / dt : 0.0;
  decode_tps_ = dt > 0 ? sampled / dt : 0.0;
  if (pending_.empty() && claimed_) {
    engine_->release();
    claimed_ = false;
  }
  return finished;
}

}  // namespace kestrel::python
