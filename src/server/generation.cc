#include "server/generation.h"

#include <algorithm>
#include <variant>

namespace kestrel::server {

Generation::Generation(EngineLoop& loop, std::string request_id, GenerateRequest req,
                       Clock::time_point arrival)
    : loop_(loop), id_(std::move(request_id)), req_(std::move(req)), arrival_(arrival) {
  choices_.resize(req_.prompts.size() * req_.params.n);
  prompt_done_.assign(req_.prompts.size(), 0);
  prompt_logprobs_.resize(req_.prompts.size());
  cached_tokens_.assign(req_.prompts.size(), -1);
}

Generation::~Generation() {
  if (!started_) return;
  for (size_t p = 0; p < prompt_done_.size(); ++p) {
    if (prompt_done_[p] < req_.params.n) loop_.abort(engine_id(static_cast<int>(p)));
  }
}

std::string Generation::engine_id(int prompt) const { return fmt::format("{}-{}", id_, prompt); }

void Generation::start() {
  started_ = true;
  for (size_t p = 0; p < req_.prompts.size(); ++p) {
    SamplingParams params = req_.params;
    params.max_tokens = req_.max_tokens[p];
    loop_.add(engine_id(static_cast<int>(p)), req_.prompts[p], std::move(params), queue_,
              static_cast<int>(p), arrival_);
  }
}

std::vector<ChoiceDelta> Generation::poll(std::chrono::milliseconds timeout) {
  std::vector<ChoiceDelta> deltas;
  if (done()) return deltas;
  for (RequestUpdate& update : queue_->wait(timeout)) apply(update, deltas);
  return deltas;
}

void Generation::apply(RequestUpdate& update, std::vector<ChoiceDelta>& deltas) {
  const int n = req_.params.n;
  auto delta_for = [&](int index) -> ChoiceDelta& {
    for (ChoiceDelta& d : deltas) {
      if (d.index == index) return d;
    }
    deltas.emplace_back().index = index;
    return deltas.back();
  };
  if (!update.error.empty()) {
    if (error_.empty()) error_ = update.error;
    for (int j = 0; j < n; ++j) {
      Choice& c = choices_[update.sub * n + j];
      if (!c.done) finish(c, delta_for(update.sub * n + j), "error");
    }
    prompt_done_[update.sub] = n;
    return;
  }
  if (cached_tokens_[update.sub] < 0) cached_tokens_[update.sub] = update.num_cached_tokens;
  if (!update.prompt_logprobs.empty()) {
    prompt_logprobs_[update.sub] = std::move(update.prompt_logprobs);
  }
  for (const CompletionOutput& s : update.samples) {
    const int index = update.sub * n + s.index;
    if (choices_[index].done) continue;
    apply_sample(update.sub, s, delta_for(index));
  }
}

void Generation::apply_sample(int prompt, const CompletionOutput& s, ChoiceDelta& delta) {
  Choice& c = choices_[prompt * req_.params.n + s.index];
  delta.token_ids.insert(delta.token_ids.end(), s.token_ids.begin(), s.token_ids.end());
  delta.logprobs.insert(delta.logprobs.end(), s.logprobs.begin(), s.logprobs.end());
  delta.text_offsets.insert(delta.text_offsets.end(), s.text_offsets.begin(), s.text_offsets.end());
  delta.text += s.text;
  c.num_tokens += static_cast<int>(s.token_ids.size());
  if (const auto* stop = std::get_if<std::string>(&s.stop_reason)) delta.stop_reason = *stop;
  if (const auto* id = std::get_if<int>(&s.stop_reason)) delta.stop_reason = *id;
  if (s.finish_reason.empty()) return;
  ++prompt_done_[prompt];
  finish(c, delta, s.finish_reason);
}

void Generation::finish(Choice& c, ChoiceDelta& delta, std::string reason) {
  c.done = true;
  ++num_done_;
  delta.finish_reason = std::move(reason);
}

int Generation::prompt_tokens() const {
  int total = 0;
  for (const auto& p : req_.prompts) total += static_cast<int>(p.size());
  return total;
}

int Generation::cached_tokens() const {
  int total = 0;
  for (int n : cached_tokens_) total += std::max(n, 0);
  return total;
}

int Generation::completion_tokens() const {
  int total = 0;
  for (const Choice& c : choices_) total += c.num_tokens;
  return total;
}

}  // namespace kestrel::server
