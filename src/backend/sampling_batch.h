// Sampling inputs for one step, flattened for a device sampler. Same semantics as the CPU
// sampler (src/sampling/sampler.h, docs/sampling.md): a device implementation must pick the
// same token for the same logits, seed and position.
#pragma once

#include <cstdint>
#include <vector>

#include "kestrel/sampling_params.h"

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
  // logit_bias: row r's (id, bias) pairs are [bias_offsets[r], bias_offsets[r + 1]) of these
  // (distinct ids; empty offsets: no row has one).
  std::vector<int> bias_tokens, bias_offsets;
  std::vector<float> bias_values;
  // Structured outputs: row r may sample only the tokens set in row allowed_row[r] of
  // allowed_masks ([rows with a mask, mask_words]; bit t % 32 of word t / 32;
  // mask_words = ceil(vocab / 32)); -1: no mask. allowed_row is empty when no row has one.
  int mask_words = 0;
  std::vector<int> allowed_row;
  std::vector<uint32_t> allowed_masks;

  // Appends a row's per-row values; the caller appends its token lists and offsets (which
  // lists a row needs is the caller's choice) and counts num_rows.
  void add_row_params(const SamplingParams& p, uint64_t row_seed, int64_t row_position) {
    temperature.push_back(p.temperature);
    top_k.push_back(p.top_k);
    top_p.push_back(p.top_p);
    min_p.push_back(p.min_p);
    repetition_penalty.push_back(p.repetition_penalty);
    presence_penalty.push_back(p.presence_penalty);
    frequency_penalty.push_back(p.frequency_penalty);
    seed.push_back(row_seed);
    position.push_back(row_position);
    num_logprobs.push_back(p.logprobs ? *p.logprobs : -1);
  }
};

// Whether row r needs only its own logits' chunk statistics (the vocab-parallel sampler of
// tensor parallelism): greedy, or temperature alone (top_k off or >= vocab, top_p 1, min_p
// 0), no logprobs, penalties, logit bias, masked tokens or allowed-token mask.
inline bool shardable_row(const SamplingBatch& b, int r, int vocab) {
  const auto n = static_cast<size_t>(r);
  const bool no_list = b.masked_offsets.empty() || b.masked_offsets[n] == b.masked_offsets[n + 1];
  const bool no_bias = b.bias_offsets.empty() || b.bias_offsets[n] == b.bias_offsets[n + 1];
  const bool no_mask = b.allowed_row.empty() || b.allowed_row[n] < 0;
  const bool no_penalty = b.repetition_penalty[n] == 1.0f && b.presence_penalty[n] == 0.0f &&
                          b.frequency_penalty[n] == 0.0f;
  const bool plain = b.temperature[n] == 0.0f ||
                     ((b.top_k[n] <= 0 || b.top_k[n] >= vocab) && b.top_p[n] >= 1.0f &&
                      b.min_p[n] <= 0.0f);
  return b.num_logprobs[n] < 0 && no_list && no_bias && no_mask && no_penalty && plain;
}

inline bool shardable(const SamplingBatch& b, int vocab) {
  for (int r = 0; r < b.num_rows; ++r) {
    if (!shardable_row(b, r, vocab)) return false;
  }
  return b.num_rows > 0;
}

}  // namespace kestrel
