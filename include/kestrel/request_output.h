// What the engine returns for a request.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace kestrel {

// Log-probabilities at one position: a generated token's, or a prompt token's.
struct TokenLogprobs {
  int token_id = 0;        // the sampled token (the prompt's token, for prompt logprobs)
  float logprob = 0.0f;    // its log-probability
  int rank = 0;            // 1 = most likely
  // The requested number of most likely tokens, most likely first.
  std::vector<std::pair<int, float>> top;
};

// One sample's output. Under OutputKind::kDelta, token_ids, text, logprobs and
// text_offsets hold what the step added; otherwise everything so far.
struct CompletionOutput {
  int index = 0;                  // which of the request's n samples
  std::vector<int> token_ids;     // generated tokens (after a stop string: up to the one
                                  // that completed it)
  std::string text;               // detokenized text, when a tokenizer is loaded
  // "" while running; then "stop" (EOS or a stop token/string), "length" (max_tokens or
  // context length), "abort" or "error".
  std::string finish_reason;
  // vLLM's stop_reason, with finish_reason "stop": the stop string that matched or the stop
  // token id that ended the sample; empty for EOS.
  std::variant<std::monostate, std::string, int> stop_reason;
  std::vector<TokenLogprobs> logprobs;  // one per generated token when asked
  // With logprobs asked and a tokenizer: per token, where its text starts in the sample's
  // whole text, in characters (OpenAI's text_offset).
  std::vector<size_t> text_offsets;
  bool finished() const { return !finish_reason.empty(); }
};

struct RequestOutput {
  std::string request_id;
  std::vector<int> prompt_token_ids;
  std::vector<CompletionOutput> outputs;
  int num_cached_tokens = 0;  // prompt tokens served from the prefix cache
  // With SamplingParams::prompt_logprobs: entry i for prompt token i + 1 (the first token has
  // no context, so none), as log_softmax of the logits at position i (the raw logits, as for
  // generated tokens). In the first output once the whole prompt is computed, and in every
  // later one unless the request asked for deltas; empty before.
  std::vector<TokenLogprobs> prompt_logprobs;
  bool finished = false;
  std::string error;          // set when finish_reason is "error"
};

}  // namespace kestrel
