// Oracle: log_softmax computed here in double from the raw logits, and ranks counted here.
#include "sampling/logprobs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "sampling/sampler.h"

namespace kestrel {
namespace {

std::vector<double> log_softmax(const std::vector<float>& l) {
  double max = -INFINITY;
  for (float x : l) max = std::max(max, static_cast<double>(x));
  double sum = 0.0;
  for (float x : l) sum += std::exp(x - max);
  std::vector<double> out;
  for (float x : l) out.push_back(x - max - std::log(sum));
  return out;
}

// 37 logits with a tie at the top two values (ids 5 and 20 share 4.0; ids 9 and 30 -> 3.0).
std::vector<float> test_logits() {
  std::vector<float> l(37);
  for (int i = 0; i < 37; ++i)
    l[i] = 0.2f * static_cast<float>((i * 11) % 37) - 6.0f;  // at most 1.2
  l[5] = l[20] = 4.0f;
  l[9] = l[30] = 3.0f;
  l[2] = -INFINITY;
  return l;
}

TEST(Logprobs, MatchLogSoftmaxOfTheRawLogits) {
  const auto l = test_logits();
  const auto ref = log_softmax(l);
  for (int token : {0, 5, 9, 17, 36}) {
    const TokenLogprobs lp = compute_logprobs(l, token, 4);
    EXPECT_EQ(lp.token_id, token);
    EXPECT_NEAR(lp.logprob, ref[token], 1e-5);
    int greater = 0;
    for (float x : l) greater += x > l[token];
    EXPECT_EQ(lp.rank, greater + 1);
    // Top 4, most likely first, equal logits by ascending id: 5, 20 (4.0), 9, 30 (3.0).
    ASSERT_EQ(lp.top.size(), 4u);
    const int want_ids[] = {5, 20, 9, 30};
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(lp.top[i].first, want_ids[i]);
      EXPECT_NEAR(lp.top[i].second, ref[want_ids[i]], 1e-5);
    }
  }
  EXPECT_EQ(compute_logprobs(l, 20, 0).rank, 1);  // tied with id 5 for first
  EXPECT_EQ(compute_logprobs(l, 30, 0).rank, 3);
}

TEST(Logprobs, TopCountIsClampedAndZeroGivesNone) {
  const auto l = test_logits();
  EXPECT_TRUE(compute_logprobs(l, 3, 0).top.empty());
  const TokenLogprobs all = compute_logprobs(l, 3, 100);
  ASSERT_EQ(all.top.size(), 37u);
  for (size_t i = 1; i < all.top.size(); ++i) {
    EXPECT_GE(all.top[i - 1].second, all.top[i].second);
  }
  EXPECT_EQ(all.top.back().first, 2);  // the -inf logit comes last
  EXPECT_TRUE(std::isinf(all.top.back().second));
  EXPECT_THROW(compute_logprobs(l, 37, 1), Error);
}

TEST(Logprobs, SamplerReportsRawLogprobsWhateverThePenaltiesAndTemperature) {
  const auto l = test_logits();
  const auto ref = log_softmax(l);
  SamplingParams p;
  p.temperature = 0.3f;
  p.repetition_penalty = 1.7f;
  p.presence_penalty = 0.4f;
  p.top_k = 5;
  p.logprobs = 3;
  const std::vector<int> prompt = {5, 9}, output = {20};
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const SamplingRow row{&p, seed, 3, prompt, output, {}};
    const SampledToken t = sample(l.data(), 37, std::span<const SamplingRow>(&row, 1))[0];
    ASSERT_TRUE(t.logprobs.has_value());
    EXPECT_EQ(t.logprobs->token_id, t.token_id);
    EXPECT_NEAR(t.logprobs->logprob, ref[t.token_id], 1e-5);
    ASSERT_EQ(t.logprobs->top.size(), 3u);
    EXPECT_EQ(t.logprobs->top[0].first, 5);
    EXPECT_NEAR(t.logprobs->top[2].second, ref[9], 1e-5);
  }
  p.logprobs.reset();
  const SamplingRow row{&p, 0, 3, prompt, output, {}};
  EXPECT_FALSE(sample(l.data(), 37, std::span<const SamplingRow>(&row, 1))[0].logprobs);
}

}  // namespace
}  // namespace kestrel
