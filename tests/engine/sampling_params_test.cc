#include "kestrel/sampling_params.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "core/error.h"

namespace kestrel {
namespace {

using ::testing::HasSubstr;

std::string error_of(const SamplingParams& p, int vocab = 100) {
  try {
    p.validate(vocab);
  } catch (const Error& e) {
    return e.what();
  }
  return "(valid)";
}

SamplingParams with(const std::function<void(SamplingParams&)>& f) {
  SamplingParams p;
  f(p);
  return p;
}

TEST(SamplingParams, DefaultsAndEdgesAreValid) {
  EXPECT_EQ(error_of(SamplingParams{}), "(valid)");
  EXPECT_EQ(error_of(with([](auto& p) {
              p.temperature = 0.0f;
              p.top_k = 0;
              p.top_p = 1.0f;
              p.min_p = 1.0f;
              p.max_tokens = 1;
              p.min_tokens = 1;
              p.repetition_penalty = 0.01f;
              p.presence_penalty = -2.0f;
              p.frequency_penalty = 2.0f;
              p.n = 128;
              p.logprobs = 20;
              p.stop_token_ids = {0, 99};
            })),
            "(valid)");
  EXPECT_EQ(error_of(with([](auto& p) {
              p.max_tokens.reset();
              p.min_tokens = 1000;
              p.logprobs = 0;
            })),
            "(valid)");
}

TEST(SamplingParams, NamesTheFirstBadParameterAndItsRange) {
  struct Case {
    std::function<void(SamplingParams&)> set;
    const char* expect;
  };
  const Case cases[] = {
      {[](auto& p) { p.temperature = -0.5f; }, "temperature must be finite and >= 0"},
      {[](auto& p) { p.temperature = INFINITY; }, "temperature"},
      {[](auto& p) { p.temperature = NAN; }, "temperature"},
      {[](auto& p) { p.top_k = -2; }, "top_k must be -1 (disabled) or >= 0, got -2"},
      {[](auto& p) { p.top_p = 0.0f; }, "top_p must be in (0, 1]"},
      {[](auto& p) { p.top_p = 1.5f; }, "top_p"},
      {[](auto& p) { p.top_p = NAN; }, "top_p"},
      {[](auto& p) { p.min_p = -0.1f; }, "min_p must be in [0, 1]"},
      {[](auto& p) { p.min_p = 1.1f; }, "min_p"},
      {[](auto& p) { p.max_tokens = 0; }, "max_tokens must be >= 1, got 0"},
      {[](auto& p) { p.min_tokens = -1; }, "min_tokens must be >= 0"},
      {[](auto& p) { p.min_tokens = 17; }, "min_tokens must be <= max_tokens (16), got 17"},
      {[](auto& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty"},
      {[](auto& p) { p.presence_penalty = 2.5f; }, "presence_penalty must be in [-2, 2]"},
      {[](auto& p) { p.frequency_penalty = -2.01f; }, "frequency_penalty must be in [-2, 2]"},
      {[](auto& p) { p.n = 0; }, "n must be in [1, 128], got 0"},
      {[](auto& p) { p.n = 129; }, "n must be in [1, 128]"},
      {[](auto& p) { p.logprobs = 21; }, "logprobs must be in [0, 20], got 21"},
      {[](auto& p) { p.logprobs = -1; }, "logprobs"},
      {[](auto& p) {
         p.stop_token_ids = {5, 100};
       },
       "stop_token_ids: 100 is outside the vocabulary [0, 100)"},
      {[](auto& p) { p.stop_token_ids = {-3}; }, "stop_token_ids: -3 is negative"},
      {[](auto& p) { p.logit_bias = {{3, 1.0f}, {100, 2.0f}}; },
       "logit_bias: token id 100 is outside the vocabulary [0, 100)"},
      {[](auto& p) { p.logit_bias = {{-1, 2.0f}}; }, "logit_bias: token id -1 is negative"},
      {[](auto& p) { p.logit_bias = {{3, 100.5f}}; },
       "logit_bias: the bias of token 3 must be in [-100, 100], got 100.5"},
      {[](auto& p) { p.logit_bias = {{3, NAN}}; }, "logit_bias: the bias of token 3"},
      {[](auto& p) { p.logit_bias = {{3, -INFINITY}}; }, "logit_bias: the bias of token 3"},
      {[](auto& p) { p.logit_bias = {{7, 1.0f}, {3, 2.0f}, {7, -1.0f}}; },
       "logit_bias: token id 7 is given more than once"},
      {[](auto& p) {
         for (int i = 0; i < 1025; ++i) p.logit_bias.emplace_back(i, 1.0f);
       },
       "logit_bias: at most 1024 entries, got 1025"},
      // Two bad values: the first in declaration order is named.
      {[](auto& p) {
         p.top_p = 2.0f;
         p.n = 0;
       },
       "top_p"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(error_of(with(c.set)), HasSubstr(c.expect));
  }
}

}  // namespace
}  // namespace kestrel
