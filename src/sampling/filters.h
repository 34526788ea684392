// The random-sampling half of the sampler for one row: temperature, the top_k / top_p /
// min_p filters, and the draw by inverse CDF.
//
// Tie rules (exact, so that a GPU version can match them):
//  - top_k keeps every token whose logit is >= the k-th largest logit, so ties at the
//    boundary are all kept (as HF's TopKLogitsWarper and vLLM); more than k may survive.
//  - top_p orders tokens by probability descending, equal probabilities by ascending id, and
//    keeps the shortest prefix whose mass (in double) is >= top_p times the mass left by
//    top_k; the most likely token is always kept.
//  - min_p drops tokens whose probability is < min_p times the largest probability.
// Expected work per row is O(vocab): top_k is an nth_element, top_p a quickselect on mass;
// nothing sorts the vocab.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kestrel/sampling_params.h"

namespace kestrel {

struct FilterScratch {
  std::vector<float> weights;  // [vocab] unnormalised probabilities, 0 = dropped
  std::vector<float> values;   // [vocab] copy for nth_element (top_k)
  std::vector<int> ids;        // candidate ids (top_p)
};

// Fills scratch.weights[0, logits.size()) with exp((logit - max) / temperature) for the
// tokens that survive top_k, top_p and min_p (in that order, each on the distribution the
// previous one left, as HF), and 0 for the others. A token whose weight underflows to 0 is
// never sampled. The largest weight is exactly 1.
// REQUIRES: params.temperature > 0. Throws kestrel::Error when no logit is finite.
void compute_kept_weights(std::span<const float> logits, const SamplingParams& params,
                          FilterScratch& scratch);

// Inverse CDF over the weights in ascending token-id order: returns the first id whose
// running sum (double) exceeds u * total. Zero-weight ids are never returned.
// REQUIRES: u in [0, 1), some weight > 0.
int draw_token(std::span<const float> weights, float u);

// The largest value, ignoring NaN (-inf when there is none). Vectorisable: lanes break the
// compare chain that makes a plain max_element slow on 150k logits.
float max_value(std::span<const float> values);

// The lowest id holding the largest value (greedy sampling's argmax; ties to the lowest id).
int argmax(std::span<const float> values);

// Debug/test entry point: the ids, ascending, that compute_kept_weights keeps.
std::vector<int> kept_token_ids(std::span<const float> logits, const SamplingParams& params);

}  // namespace kestrel
