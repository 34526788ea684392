// The sampler: picks the next token of each row from its F32 logits. Pure CPU; the
// reference that a GPU sampler must reproduce (docs/sampling.md).
//
// Per row, in this order (as vLLM):
//   0. allowed: tokens outside the row's allowed mask (structured outputs) get -inf;
//   1. min_tokens: stop ids (and EOS unless ignore_eos) get -inf while fewer than
//      min_tokens tokens were generated;
//   2. penalties: repetition (HF), then frequency and presence (OpenAI);
//   3. temperature == 0: argmax, ties to the lowest id. Otherwise divide by temperature,
//      softmax, top_k, top_p, min_p (filters.h has the tie rules) and draw
//      u = uniform01(seed, position, stream 0) (core/philox.h), picking by inverse CDF over
//      the kept tokens in ascending id order.
//   4. logprobs (when params->logprobs is set): from the raw logits (logprobs.h).
// A row's token depends only on its logits, its parameters, its token history and
// (seed, position): never on the other rows of the batch or their order.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/model_executor.h"
#include "kestrel/sampling_params.h"

namespace kestrel {

struct SamplingRow {
  const SamplingParams* params = nullptr;
  uint64_t seed = 0;     // the sequence's seed
  int64_t position = 0;  // index of the token being sampled in the sequence (>= 0)
  std::span<const int> prompt_token_ids;
  std::span<const int> output_token_ids;
  // The model's EOS ids. Masked (with params->stop_token_ids) while
  // output_token_ids.size() < params->min_tokens, unless params->ignore_eos.
  std::span<const int> eos_token_ids;
  // Structured outputs: when not empty, only tokens whose bit is set (bit t % 32 of word
  // t / 32; tokens past the span are clear) may be sampled. Applied first, to a copy of
  // the logits (-inf elsewhere); logprobs still come from the raw logits.
  std::span<const uint32_t> allowed = {};
};

// logits: [rows.size(), vocab] F32, row-major; finite or -inf (at least one finite per
// sampled row). Not modified. Returns one SampledToken per row, in row order, with
// logprobs filled when the row's params ask for them.
// Rows run in parallel (OpenMP); each thread keeps O(vocab) scratch between calls.
// Throws kestrel::Error for a null params pointer, parameters out of range (temperature
// < 0, top_k < -1, top_p outside (0, 1], min_p outside [0, 1], repetition_penalty <= 0,
// logprobs < 0), a negative position, token ids outside the vocab, or a row with no finite
// logit.
std::vector<SampledToken> sample(const float* logits, int vocab, std::span<const SamplingRow> rows);

}  // namespace kestrel
