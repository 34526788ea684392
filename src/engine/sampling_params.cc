#include "kestrel/sampling_params.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace kestrel {
namespace {

constexpr int kMaxN = 128;
constexpr int kMaxLogprobs = SamplingParams::kMaxLogprobs;

}  // namespace

void SamplingParams::validate(int vocab_size) const {
  KS_CHECK(std::isfinite(temperature) && temperature >= 0.0f,
           "temperature must be finite and >= 0, got {}", temperature);
  KS_CHECK(top_k == -1 || top_k >= 0, "top_k must be -1 (disabled) or >= 0, got {}", top_k);
  KS_CHECK(top_p > 0.0f && top_p <= 1.0f, "top_p must be in (0, 1], got {}", top_p);
  KS_CHECK(min_p >= 0.0f && min_p <= 1.0f, "min_p must be in [0, 1], got {}", min_p);
  if (max_tokens) KS_CHECK(*max_tokens >= 1, "max_tokens must be >= 1, got {}", *max_tokens);
  KS_CHECK(min_tokens >= 0, "min_tokens must be >= 0, got {}", min_tokens);
  // EOS is sometimes the only token a constraint allows (its pattern is complete): masking
  // it would leave the row nothing to sample.
  KS_CHECK(min_tokens == 0 || !constraint,
           "min_tokens cannot be combined with structured outputs (the constraint decides where the "
           "output may end), got {}", min_tokens);
  if (max_tokens) {
    KS_CHECK(min_tokens <= *max_tokens, "min_tokens must be <= max_tokens ({}), got {}",
             *max_tokens, min_tokens);
  }
  KS_CHECK(repetition_penalty > 0.0f && std::isfinite(repetition_penalty),
           "repetition_penalty must be finite and > 0, got {}", repetition_penalty);
  KS_CHECK(presence_penalty >= -2.0f && presence_penalty <= 2.0f,
           "presence_penalty must be in [-2, 2], got {}", presence_penalty);
  KS_CHECK(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f,
           "frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  KS_CHECK(n >= 1 && n <= kMaxN, "n must be in [1, {}], got {}", kMaxN, n);
  if (logprobs) {
    KS_CHECK(*logprobs >= 0 && *logprobs <= kMaxLogprobs, "logprobs must be in [0, {}], got {}",
             kMaxLogprobs, *logprobs);
  }
  if (prompt_logprobs) {
    KS_CHECK(*prompt_logprobs >= 0 && *prompt_logprobs <= kMaxLogprobs,
             "prompt_logprobs must be in [0, {}], got {}", kMaxLogprobs, *prompt_logprobs);
  }
  KS_CHECK(logit_bias.size() <= kMaxLogitBias, "logit_bias: at most {} entries, got {}",
           kMaxLogitBias, logit_bias.size());
  std::vector<int> bias_ids;
  bias_ids.reserve(logit_bias.size());
  for (const auto& [id, bias] : logit_bias) {
    KS_CHECK(id >= 0, "logit_bias: token id {} is negative", id);
    KS_CHECK(id < vocab_size, "logit_bias: token id {} is outside the vocabulary [0, {})", id,
             vocab_size);
    KS_CHECK(std::isfinite(bias) && bias >= -kMaxBias && bias <= kMaxBias,
             "logit_bias: the bias of token {} must be in [-{}, {}], got {}", id, kMaxBias,
             kMaxBias, bias);
    bias_ids.push_back(id);
  }
  std::sort(bias_ids.begin(), bias_ids.end());
  const auto dup = std::adjacent_find(bias_ids.begin(), bias_ids.end());
  KS_CHECK(dup == bias_ids.end(), "logit_bias: token id {} is given more than once", *dup);
  // Python checks without a model (vocab_size INT_MAX): a negative id is named as such rather
  // than as outside [0, 2147483647).
  for (int id : stop_token_ids) {
    KS_CHECK(id >= 0, "stop_token_ids: {} is negative", id);
    KS_CHECK(id < vocab_size, "stop_token_ids: {} is outside the vocabulary [0, {})", id,
             vocab_size);
  }
}

}  // namespace kestrel
