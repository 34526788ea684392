#include "stream_session.h"

#include "core/error.h"
#include "engine/llm_engine.h"
#include "runtime/stop_strings.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::python {

StreamSession::StreamSession(std::shared_ptr<EngineHandle> engine, const std::vector<int>& prompt,
                             const SamplingParams& params)
    : engine_(std::move(engine)) {
  const Tokenizer* tokenizer = engine_->llm().tokenizer();
  KS_CHECK(tokenizer != nullptr, "streaming text needs tokenizer.json in the model directory");
  KS_CHECK(params.n == 1, "streaming: n must be 1, got {}", params.n);
  DetokenizerOptions options;  // made first: bad stop strings throw before anything runs
  options.stop = params.stop;
  options.include_stop_str_in_output = params.include_stop_str_in_output;
  detok_.emplace(*tokenizer, options, prompt);
  engine_->claim();
  claimed_ = true;
  id_ = engine_->next_request_id();
  SamplingParams cumulative = params;  // the detokenizer takes the whole token list
  cumulative.output_kind = OutputKind::kCumulative;
  try {
    std::lock_guard<std::mutex> lock(engine_->mutex());
    engine_->llm().engine().add_request(id_, prompt, std::move(cumulative));
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
    engine_->llm().engine().abort_request(id_);
    aborted_ = true;
  }
  if (claimed_) engine_->release();
  claimed_ = false;
}

void StreamSession::finish(RequestOutput out) {
  output_ = std::move(out);
  if (claimed_) engine_->release();
  claimed_ = false;
}

std::string StreamSession::step() {
  std::string text;
  if (done()) return text;
  std::lock_guard<std::mutex> lock(engine_->mutex());
  LLMEngine& engine = engine_->llm().engine();
  for (RequestOutput& out : engine.step()) {
    if (out.request_id != id_) continue;
    CompletionOutput& c = out.outputs.at(0);
    size_t fed = detok_->num_tokens();
    while (fed < c.token_ids.size() && !detok_->stopped()) text += detok_->add_token(c.token_ids[fed++]);
    if (detok_->stopped()) {  // the tokens after the one that completed the match go
      engine.abort_request(id_);
      c = cut_at_stop(std::move(c), fed, *detok_);
      out.finished = true;
      finish(std::move(out));
    } else if (out.finished) {
      text += detok_->finish();
      out.outputs[0].text = std::string(detok_->output_text());
      finish(std::move(out));
    }
    break;
  }
  return text;
}

}  // namespace kestrel::python
