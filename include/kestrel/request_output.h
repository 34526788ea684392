// What the engine returns for a request.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace kestrel {

// Log-probabilities at one generated position.
struct TokenLogprobs {
  int token_id = 0;        // the sampled token
  float logprob = 0.0f;    // its log-probability
  int rank = 0;            // 1 = most likely
  // The requested number of most likely tokens, most likely first.
  std::vector<std::pair<int, float>> top;
};

struct CompletionOutput {
  int index = 0;                  // which of the request's n samples
  std::vector<int> token_ids;     // generated tokens so far
  std::string text;               // detokenized text, when a tokenizer is loaded
  // "" while running; then "stop" (EOS or a stop token/string), "length" (max_tokens or
  // context length), "abort" or "error".
  std::string finish_reason;
  std::vector<TokenLogprobs> logprobs;  // one per generated token when asked
  bool finished() const { return !finish_reason.empty(); }
};

struct RequestOutput {
  std::string request_id;
  std::vector<int> prompt_token_ids;
  std::vector<CompletionOutput> outputs;
  int num_cached_tokens = 0;  // prompt tokens served from the prefix cache
  bool finished = false;
  std::string error;          // set when finish_reason is "error"
};

}  // namespace kestrel
