#include "runtime/stop_strings.h"

#include <algorithm>

namespace kestrel {

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
      CompletionOutput cut = c;
      cut.token_ids.resize(i + 1);
      if (cut.logprobs.size() > i + 1) cut.logprobs.resize(i + 1);
      cut.text = std::string(d.output_text());
      cut.finish_reason = "stop";
      cut_[c.index] = std::move(cut);
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
