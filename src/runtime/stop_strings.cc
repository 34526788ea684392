#include "runtime/stop_strings.h"

#include <algorithm>

namespace kestrel {

CompletionOutput cut_at_stop(CompletionOutput c, size_t num_tokens, const Detokenizer& d) {
  c.token_ids.resize(num_tokens);
  if (c.logprobs.size() > num_tokens) c.logprobs.resize(num_tokens);
  c.text = std::string(d.output_text());
  c.finish_reason = "stop";
  return c;
}

StopStrings::StopStrings(const Tokenizer& tokenizer, const SamplingParams& params,
                         std::span<const int> prompt_ids) {
  DetokenizerOptions options;
  options.stop = params.stop;
  options.include_stop_str_in_output = params.include_stop_str_in_output;
  for (int i = 0; i < params.n; ++i) detok_.emplace_back(tokenizer, options, prompt_ids);
  cut_.resize(params.n);
}

std::vector<int> StopStrings::update(const RequestOutput& out) {
  std::vector<int> stopped;
  for (const CompletionOutput& c : out.outputs) {
    if (c.index < 0 || c.index >= static_cast<int>(detok_.size()) || cut(c.index)) continue;
    Detokenizer& d = detok_[c.index];
    // One id at a time: the first one after which the text holds a stop string ends it.
    for (size_t i = d.num_tokens(); i < c.token_ids.size(); ++i) {
      d.add_token(c.token_ids[i]);
      if (!d.stopped()) continue;
      cut_[c.index] = cut_at_stop(c, i + 1, d);
      stopped.push_back(c.index);
      break;
    }
  }
  return stopped;
}

void StopStrings::apply(RequestOutput& out) const {
  for (CompletionOutput& c : out.outputs) {
    if (cut(c.index)) c = *cut_[c.index];
  }
  out.finished = std::all_of(out.outputs.begin(), out.outputs.end(),
                             [](const CompletionOutput& c) { return c.finished(); });
}

}  // namespace kestrel
