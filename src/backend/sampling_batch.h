// Sampling inputs for one step, flattened for a device sampler. Same semantics as the CPU
// sampler (src/sampling/sampler.h, docs/sampling.md): a device implementation must pick the
// same token for the same logits, seed and position.
#pragma once

#include <cstdint>
#include <vector>

namespace kestrel {

struct SamplingBatch {
  int num_rows = 0;
  // Per row.
  std::vector<float> temperature;  // 0 = greedy
  std::vector<int> top_k;          // <= 0: off
  std::vector<float> top_p;
  std::vector<float> min_p;
  std::vector<float> repetition_penalty;
  std::vector<float> presence_penalty;
  std::vector<float> frequency_penalty;
  std::vector<uint64_t> seed;
  std::vector<int64_t> position;   // index of the token being sampled
  std::vector<int> num_logprobs;   // -1: no logprobs
  // Token lists per row r: [offsets[r], offsets[r + 1]) of the flat arrays.
  std::vector<int> prompt_tokens, prompt_offsets;  // for repetition_penalty
  std::vector<int> output_tokens, output_offsets;  // for all three penalties
  std::vector<int> masked_tokens, masked_offsets;  // forced to -inf (min_tokens: EOS, stop ids)
};

}  // namespace kestrel
