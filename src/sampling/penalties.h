// Logit processors that run before temperature: min_tokens masking and the repetition,
// presence and frequency penalties. They act on one row of F32 logits in place.
//
// Thread safety: the functions touch only their arguments (and the scratch passed in).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kestrel/sampling_params.h"

namespace kestrel {

// Per-thread scratch of `vocab` entries, kept all-zero between calls so that a call costs
// O(prompt + output) and not O(vocab).
struct PenaltyScratch {
  std::vector<uint8_t> seen;
  std::vector<int32_t> counts;
};

// While fewer than params.min_tokens tokens were generated, sets to -inf the logits of the
// ids that would end the sequence: params.stop_token_ids always, and eos_token_ids unless
// params.ignore_eos (with ignore_eos an EOS does not stop the sequence, so there is nothing
// to hold back; vLLM masks it anyway, a difference without effect on when a request stops).
// Ids outside [0, logits.size()) can never be sampled and are skipped.
void apply_min_tokens(std::span<float> logits, const SamplingParams& params,
                      size_t num_output_tokens, std::span<const int> eos_token_ids);

// Applies, in this order (as vLLM):
//  1. repetition_penalty p (Hugging Face's RepetitionPenaltyLogitsProcessor): for each
//     distinct id in prompt or output, logit > 0 ? logit / p : logit * p;
//  2. frequency and presence penalties (OpenAI), over output ids only:
//     logit -= frequency_penalty * count; logit -= presence_penalty * (count > 0).
// A penalty at its neutral value (1, 0, 0) costs nothing.
// Throws kestrel::Error when a prompt or output id is outside [0, logits.size()).
// `scratch` may be null (a temporary one is used); when given it must be all-zero (as left
// by a previous call) or empty.
void apply_penalties(std::span<float> logits, const SamplingParams& params,
                     std::span<const int> prompt_token_ids, std::span<const int> output_token_ids,
                     PenaltyScratch* scratch = nullptr);

// logit_bias (OpenAI): logits[id] += bias for each entry, in float. Ids outside
// [0, logits.size()) are skipped (validate() rejects them earlier). After apply_min_tokens and
// before apply_penalties, as vLLM; -inf stays -inf.
void apply_logit_bias(std::span<float> logits, const SamplingParams& params);

// True when apply_penalties would change anything for these parameters.
bool has_penalties(const SamplingParams& params);

}  // namespace kestrel
