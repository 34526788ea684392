#include "runtime/output_processor.h"

#include <algorithm>
#include <string_view>

#include "core/error.h"

namespace kestrel {
namespace {

// A prompt matters to the detokenizer only through a character it leaves unfinished: a few
// tokens at most.
constexpr size_t kPromptContextTokens = 8;

size_t count_chars(std::string_view s) {
  return static_cast<size_t>(std::count_if(
      s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

}  // namespace

OutputProcessor::OutputProcessor(const Tokenizer* tokenizer, const SamplingParams& params,
                                 std::span<const int> prompt)
    : params_(params), prompt_(prompt.begin(), prompt.end()) {
  KS_CHECK(params.stop.empty() || tokenizer != nullptr,
           "stop strings need tokenizer.json in the model directory");
  KS_CHECK(params.stop.empty() || params.detokenize, "stop strings need detokenize");
  KS_CHECK(params.n >= 1, "n must be >= 1, got {}", params.n);
  const bool watch = params.output_kind != OutputKind::kFinalOnly || !params.stop.empty();
  engine_kind_ = watch ? OutputKind::kDelta : OutputKind::kFinalOnly;
  DetokenizerOptions options;
  options.skip_special_tokens = params.skip_special_tokens;
  options.stop = params.stop;
  options.include_stop_str_in_output = params.include_stop_str_in_output;
  options.min_tokens = params.min_tokens;
  const std::span<const int> context = prompt.last(std::min(prompt.size(), kPromptContextTokens));
  samples_.resize(static_cast<size_t>(params.n));
  for (int i = 0; i < params.n; ++i) {
    samples_[i].all.index = i;
    if (tokenizer && params.detokenize) samples_[i].detok.emplace(*tokenizer, options, context);
  }
}

OutputProcessor::Result OutputProcessor::process(RequestOutput in) {
  Result result;
  num_cached_tokens_ = in.num_cached_tokens;
  if (!in.prompt_logprobs.empty()) prompt_logprobs_ = std::move(in.prompt_logprobs);
  RequestOutput delta;
  delta.request_id = std::move(in.request_id);
  for (const CompletionOutput& c : in.outputs) {
    if (c.index < 0 || c.index >= static_cast<int>(samples_.size())) continue;
    Sample& s = samples_[c.index];
    if (s.all.finished()) continue;  // a stop string ended it; the engine may lag
    CompletionOutput d;
    d.index = c.index;
    if (advance(s, c, d)) result.stopped.push_back(c.index);
    if (d.token_ids.empty() && d.text.empty() && !d.finished()) continue;
    CompletionOutput& all = s.all;
    all.token_ids.insert(all.token_ids.end(), d.token_ids.begin(), d.token_ids.end());
    all.text += d.text;
    all.logprobs.insert(all.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
    all.text_offsets.insert(all.text_offsets.end(), d.text_offsets.begin(), d.text_offsets.end());
    all.finish_reason = d.finish_reason;
    all.stop_reason = d.stop_reason;
    delta.outputs.push_back(std::move(d));
  }
  if (delta.outputs.empty()) return result;
  const bool done = finished();
  if (params_.output_kind == OutputKind::kDelta) {
    if (!prompt_sent_) delta.prompt_token_ids = prompt_;
    prompt_sent_ = true;
    if (!prompt_logprobs_sent_ && !prompt_logprobs_.empty()) {
      delta.prompt_logprobs = prompt_logprobs_;
      prompt_logprobs_sent_ = true;
    }
    delta.num_cached_tokens = num_cached_tokens_;
    delta.finished = done;
    result.output = std::move(delta);
  } else if (done || params_.output_kind == OutputKind::kCumulative) {
    RequestOutput out;
    out.request_id = std::move(delta.request_id);
    out.prompt_token_ids = prompt_;
    out.prompt_logprobs = prompt_logprobs_;
    out.num_cached_tokens = num_cached_tokens_;
    out.finished = done;
    for (const Sample& s : samples_) out.outputs.push_back(s.all);
    result.output = std::move(out);
  }
  return result;
}

bool OutputProcessor::advance(Sample& s, const CompletionOutput& in, CompletionOutput& d) {
  const bool offsets = params_.logprobs.has_value();
  for (size_t i = 0; i < in.token_ids.size(); ++i) {
    d.token_ids.push_back(in.token_ids[i]);
    if (i < in.logprobs.size()) d.logprobs.push_back(in.logprobs[i]);
    if (offsets) d.text_offsets.push_back(s.num_chars);
    if (!s.detok) continue;
    // As vLLM does, the token that ended the sequence (EOS or one of stop_token_ids) adds no
    // text unless include_stop_str_in_output: with skip_special_tokens off it would otherwise
    // show "<|im_end|>".
    const bool stop_token = in.finish_reason == "stop" && i + 1 == in.token_ids.size();
    if (stop_token && !params_.include_stop_str_in_output) continue;
    const std::string piece = s.detok->add_token(in.token_ids[i]);
    s.num_chars += count_chars(piece);
    d.text += piece;
    if (s.detok->stopped()) {
      // The tokens after the one that completed the stop string are not part of the output.
      d.stop_reason = params_.stop[*s.detok->stop_index()];
      finish(s, d, "stop");
      return true;
    }
  }
  if (in.finish_reason.empty()) return false;
  if (s.detok) {
    const std::string rest = s.detok->finish();
    s.num_chars += count_chars(rest);
    d.text += rest;
  }
  if (in.finish_reason == "stop") {
    const int last = d.token_ids.empty() ? (s.all.token_ids.empty() ? -1 : s.all.token_ids.back())
                                         : d.token_ids.back();
    const std::vector<int>& ids = params_.stop_token_ids;
    if (std::find(ids.begin(), ids.end(), last) != ids.end()) d.stop_reason = last;
  }
  finish(s, d, in.finish_reason);
  return false;
}

void OutputProcessor::finish(Sample& s, CompletionOutput& d, std::string reason) {
  d.finish_reason = std::move(reason);
  s.all.finish_reason = d.finish_reason;  // before process() merges: advance() stops here
  ++num_finished_;
}

}  // namespace kestrel
