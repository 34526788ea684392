#include "sampling/logprobs.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "sampling/filters.h"

namespace kestrel {

TokenLogprobs compute_logprobs(std::span<const float> raw_logits, int token_id, int num_top) {
  const size_t vocab = raw_logits.size();
  KS_CHECK(token_id >= 0 && static_cast<size_t>(token_id) < vocab,
           "logprobs: token id {} is outside the vocab [0, {})", token_id, vocab);
  KS_CHECK(num_top >= 0, "logprobs: the number of top tokens must be >= 0, got {}", num_top);
  const float max = max_value(raw_logits);
  KS_CHECK(std::isfinite(max), "logprobs need a finite logit; the largest is {}", max);

  double sum = 0.0;
  for (float l : raw_logits) sum += std::exp(static_cast<double>(l) - max);
  const double lse = static_cast<double>(max) + std::log(sum);
  auto logprob = [&](int i) { return static_cast<float>(raw_logits[i] - lse); };

  TokenLogprobs out;
  out.token_id = token_id;
  out.logprob = logprob(token_id);
  const float chosen = raw_logits[token_id];
  int greater = 0;
  for (float l : raw_logits) greater += l > chosen;
  out.rank = greater + 1;

  // A sorted list of the best min(num_top, vocab) ids. Ids arrive in ascending order, so
  // inserting after equal logits keeps ties by ascending id.
  const size_t n = std::min(static_cast<size_t>(num_top), vocab);
  std::vector<int> top;
  top.reserve(n + 1);
  for (size_t i = 0; i < vocab && n > 0; ++i) {
    const float l = raw_logits[i];
    if (top.size() == n && !(l > raw_logits[top.back()])) continue;
    auto pos = std::upper_bound(top.begin(), top.end(), l,
                                [&](float v, int id) { return v > raw_logits[id]; });
    top.insert(pos, static_cast<int>(i));
    if (top.size() > n) top.pop_back();
  }
  out.top.reserve(n);
  for (int id : top) out.top.emplace_back(id, logprob(id));
  return out;
}

}  // namespace kestrel
