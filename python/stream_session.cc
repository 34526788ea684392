#include "stream_session.h"

#include "core/error.h"

namespace kestrel::python {

StreamSession::StreamSession(std::shared_ptr<EngineHandle> engine, const std::vector<int>& prompt,
                             const SamplingParams& params)
    : engine_(std::move(engine)) {
  KS_CHECK(engine_->llm().tokenizer() != nullptr,
           "streaming text needs tokenizer.json in the model directory");
  KS_CHECK(params.n == 1, "streaming: n must be 1, got {}", params.n);
  engine_->claim();
  claimed_ = true;
  SamplingParams cumulative = params;  // the text grows; each new piece is its new end
  cumulative.output_kind = OutputKind::kCumulative;
  try {
    std::lock_guard<std::mutex> lock(engine_->mutex());
    stream_.emplace(engine_->llm().add_request(prompt, std::move(cumulative)));
  } catch (...) {
    engine_->release();
    claimed_ = false;
    aborted_ = true;
    throw;
  }
}

StreamSession::~StreamSession() { abort(); }

void StreamSession::abort() {
  if (!done()) {
    std::lock_guard<std::mutex> lock(engine_->mutex());
    stream_->abort();
    aborted_ = true;
  }
  if (claimed_) engine_->release();
  claimed_ = false;
}

std::string StreamSession::step() {
  std::string text;
  if (done()) return text;
  std::lock_guard<std::mutex> lock(engine_->mutex());
  engine_->llm().step();
  for (RequestOutput& out : stream_->take()) {
    const std::string& all = out.outputs.at(0).text;
    if (all.size() > emitted_) text += all.substr(emitted_);
    emitted_ = all.size();
    if (!out.finished) continue;
    output_ = std::move(out);
    if (claimed_) engine_->release();
    claimed_ = false;
  }
  return text;
}

}  // namespace kestrel::python
