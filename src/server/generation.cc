#include "server/generation.h"

#include <algorithm>
#include <span>

namespace kestrel::server {
namespace {

size_t count_chars(const std::string& s) {
  return static_cast<size_t>(std::count_if(
      s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

// The unfinished-character context the detokenizer needs is at most a few tokens.
constexpr size_t kPromptContextTokens = 8;

}  // namespace

Generation::Generation(EngineLoop& loop, const ServingContext& ctx, std::string request_id,
                       GenerateRequest req, Clock::time_point arrival)
    : loop_(loop), ctx_(ctx), id_(std::move(request_id)), req_(std::move(req)), arrival_(arrival) {
  const int n = req_.params.n;
  choices_.resize(req_.prompts.size() * n);
  prompt_done_.assign(req_.prompts.size(), 0);
  for (size_t p = 0; p < req_.prompts.size(); ++p) {
    const std::vector<int>& prompt = req_.prompts[p];
    const size_t context = std::min(prompt.size(), kPromptContextTokens);
    for (int j = 0; j < n; ++j) {
      if (ctx_.tokenizer) {
        choices_[p * n + j].detok.emplace(*ctx_.tokenizer, req_.detok,
                                          std::span<const int>(prompt).last(context));
      }
    }
  }
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
  for (const RequestUpdate& update : queue_->wait(timeout)) apply(update, deltas);
  return deltas;
}

void Generation::apply(const RequestUpdate& update, std::vector<ChoiceDelta>& deltas) {
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
  for (const SampleUpdate& s : update.samples) {
    const int index = update.sub * n + s.sample_index;
    if (choices_[index].done) continue;
    apply_sample(update.sub, s, delta_for(index));
  }
}

void Generation::apply_sample(int prompt, const SampleUpdate& s, ChoiceDelta& delta) {
  Choice& c = choices_[prompt * req_.params.n + s.sample_index];
  for (size_t i = 0; i < s.token_ids.size(); ++i) {
    const int id = s.token_ids[i];
    delta.token_ids.push_back(id);
    if (i < s.logprobs.size()) delta.logprobs.push_back(s.logprobs[i]);
    delta.text_offsets.push_back(c.num_chars);
    ++c.num_tokens;
    if (!c.detok) continue;
    const std::string piece = c.detok->add_token(id);
    c.num_chars += count_chars(piece);
    delta.text += piece;
    if (c.detok->stopped()) {
      delta.stop_reason = req_.detok.stop[*c.detok->stop_index()];
      // Tokens after the one that completed the stop string are not part of the output.
      loop_.finish_sample(engine_id(prompt), s.sample_index);
      finish(c, delta, "stop");
      ++prompt_done_[prompt];
      return;
    }
  }
  if (s.finish_reason.empty()) return;
  if (c.detok) {
    const std::string rest = c.detok->finish();
    c.num_chars += count_chars(rest);
    delta.text += rest;
  }
  if (s.finish_reason == "stop" && !delta.token_ids.empty()) {
    const int last = delta.token_ids.back();
    const auto& stop_ids = req_.params.stop_token_ids;
    if (std::find(stop_ids.begin(), stop_ids.end(), last) != stop_ids.end())
      delta.stop_reason = last;
  }
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

int Generation::completion_tokens() const {
  int total = 0;
  for (const Choice& c : choices_) total += c.num_tokens;
  return total;
}

}  // namespace kestrel::server
