// Stop strings for LLM::generate. The engine works on token ids, so text stop conditions are
// checked here, on each sample's incremental detokenization (Detokenizer finds matches
// across token boundaries). A sample whose text reaches a stop string is ended by the
// caller (LLMEngine::abort_sample) and its output is cut after the token that completed the
// match, its text right before the match (or after it with include_stop_str_in_output),
// finish_reason "stop": what the server returns for the same request.
//
// Not thread-safe; one per request, used by the thread that steps the engine.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "kestrel/request_output.h"
#include "kestrel/sampling_params.h"
#include "tokenizer/detokenizer.h"

namespace kestrel {

// `c` as a stop string leaves it: the first `num_tokens` tokens (and their logprobs), the
// detokenizer's text, finish_reason "stop". `d` has stopped after its num_tokens-th token.
CompletionOutput cut_at_stop(CompletionOutput c, size_t num_tokens, const Detokenizer& d);

class StopStrings {
 public:
  // Throws kestrel::Error when a stop string is empty or not valid UTF-8.
  StopStrings(const Tokenizer& tokenizer, const SamplingParams& params,
              std::span<const int> prompt_ids);

  // Feeds a request's latest output (new tokens of every sample); returns the indices of the
  // samples whose text reached a stop string in it.
  std::vector<int> update(const RequestOutput& out);
  // Puts the cut outputs of stopped samples into `out`, and marks `out` finished when every
  // sample is.
  void apply(RequestOutput& out) const;
  // Whether sample `index` was cut by a stop string (its text is then already set).
  bool cut(int index) const { return index >= 0 && index < static_cast<int>(cut_.size()) && cut_[index]; }

 private:
  std::vector<Detokenizer> detok_;                    // per sample
  std::vector<std::optional<CompletionOutput>> cut_;  // per sample, once stopped
};

}  // namespace kestrel
