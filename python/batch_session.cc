#include "batch_session.h"

#include <chrono>

#include "core/error.h"
#include "engine/llm_engine.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::python {

BatchSession::BatchSession(std::shared_ptr<EngineHandle> engine,
                           const std::vector<std::vector<int>>& prompts,
                           const std::vector<SamplingParams>& params)
    : engine_(std::move(engine)), stops_(prompts.size()) {
  KS_CHECK(params.size() == 1 || params.size() == prompts.size(),
           "generate: {} sampling params for {} prompts (give one, or one per prompt)",
           params.size(), prompts.size());
  LLM& llm = engine_->llm();
  const Tokenizer* tokenizer = llm.tokenizer();
  // Stop strings first: a bad one fails the call before anything is queued.
  for (size_t i = 0; i < prompts.size(); ++i) {
    const SamplingParams& p = params.size() == 1 ? params[0] : params[i];
    if (p.stop.empty()) continue;
    KS_CHECK(tokenizer != nullptr,
             "prompt {}: stop strings need tokenizer.json in the model directory", i);
    try {
      stops_[i].emplace(*tokenizer, p, prompts[i]);
    } catch (const Error& e) {
      throw_error("prompt {}: {}", i, e.what());
    }
  }
  engine_->claim();
  claimed_ = true;
  std::lock_guard<std::mutex> lock(engine_->mutex());
  try {
    for (size_t i = 0; i < prompts.size(); ++i) {
      const std::string id = engine_->next_request_id();
      // Only finished requests are returned; stop strings need every step's tokens.
      SamplingParams p = params.size() == 1 ? params[0] : params[i];
      p.output_kind = stops_[i] ? OutputKind::kCumulative : OutputKind::kFinalOnly;
      try {
        llm.engine().add_request(id, prompts[i], std::move(p));
      } catch (const Error& e) {
        throw_error("prompt {}: {}", i, e.what());
      }
      pending_.emplace(id, i);
    }
  } catch (...) {
    for (const auto& [id, index] : pending_) llm.engine().abort_request(id);
    pending_.clear();
    engine_->release();
    claimed_ = false;
    throw;
  }
}

BatchSession::~BatchSession() { abort(); }

void BatchSession::abort() {
  if (!pending_.empty()) {
    std::lock_guard<std::mutex> lock(engine_->mutex());
    for (const auto& [id, index] : pending_) engine_->llm().engine().abort_request(id);
    pending_.clear();
  }
  if (claimed_) engine_->release();
  claimed_ = false;
}

std::vector<std::pair<size_t, RequestOutput>> BatchSession::step() {
  std::vector<std::pair<size_t, RequestOutput>> finished;
  if (pending_.empty()) return finished;
  std::lock_guard<std::mutex> lock(engine_->mutex());
  LLMEngine& engine = engine_->llm().engine();
  const Tokenizer* tokenizer = engine_->llm().tokenizer();
  const EngineStats before = engine.stats();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<RequestOutput> outputs = engine.step();
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const EngineStats after = engine.stats();
  for (RequestOutput& out : outputs) {
    auto it = pending_.find(out.request_id);
    if (it == pending_.end()) continue;
    const size_t index = it->second;
    if (std::optional<StopStrings>& stop = stops_[index]) {
      for (int sample : stop->update(out)) engine.abort_sample(out.request_id, sample);
      stop->apply(out);
    }
    if (!out.finished) continue;
    if (tokenizer) {
      for (CompletionOutput& c : out.outputs) {
        if (stops_[index] && stops_[index]->cut(c.index)) continue;  // text already set
        c.text = tokenizer->decode(c.token_ids, true);
      }
    }
    pending_.erase(it);  // an aborted request may still be reported this step
    finished.emplace_back(index, std::move(out));
  }
  const double computed = double(after.total_computed_tokens - before.total_computed_tokens);
  const double sampled = double(after.total_generation_tokens - before.total_generation_tokens);
  prefill_tps_ = dt > 0 ? (computed - sampled) / dt : 0.0;
  decode_tps_ = dt > 0 ? sampled / dt : 0.0;
  if (pending_.empty() && claimed_) {
    engine_->release();
    claimed_ = false;
  }
  return finished;
}

}  // namespace kestrel::python
