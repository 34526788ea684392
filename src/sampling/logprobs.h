// Log-probabilities returned to the user for one generated position.
//
// Semantics follow vLLM v1's default ("raw_logprobs"): log_softmax of the model's raw
// logits, before min_tokens masking, penalties, temperature and the top_k/top_p/min_p
// filters. So the sampled token's logprob describes the model, not the sampler, and is
// finite even when a filter would have made the token impossible.
#pragma once

#include <span>

#include "kestrel/request_output.h"

namespace kestrel {

// raw_logits: [vocab]; finite or -inf, at least one finite.
// Returns the logprob of token_id and its rank (1 + the number of tokens with a strictly
// larger logit, so tied tokens share a rank), plus the min(num_top, vocab) most likely
// tokens, most likely first, equal logits by ascending id. num_top = 0 gives an empty list.
// The log-sum-exp is accumulated in double. O(vocab * num_top) worst case, O(vocab) typical.
// Throws kestrel::Error when no logit is finite or token_id is outside [0, vocab).
TokenLogprobs compute_logprobs(std::span<const float> raw_logits, int token_id, int num_top);

}  // namespace kestrel
