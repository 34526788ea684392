// Oracles: values computed by hand from Hugging Face's RepetitionPenaltyLogitsProcessor
// (logit > 0 ? logit / p : logit * p, once per distinct id in prompt or output) and
// OpenAI's presence/frequency formula (logit -= frequency * count + presence * (count > 0),
// output tokens only). Every expected value below is exact in float.
#include "sampling/penalties.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"

namespace kestrel {
namespace {

constexpr float kInf = INFINITY;

TEST(Penalties, RepetitionDividesPositiveAndMultipliesNegativeOncePerId) {
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, -3.0f, 4.0f, 1.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  // Id 0 is in prompt and output and id 1 twice in the prompt: each is penalised once.
  const std::vector<int> prompt = {0, 1, 1};
  const std::vector<int> output = {3, 0};
  apply_penalties(logits, p, prompt, output);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -2.0f, 0.5f, -6.0f, 4.0f, 1.0f}));
}

TEST(Penalties, RepetitionBelowOneRewardsSeenTokens) {
  std::vector<float> logits = {2.0f, -1.0f, 0.0f, 3.0f};
  SamplingParams p;
  p.repetition_penalty = 0.5f;
  const std::vector<int> prompt = {0, 1, 2};
  apply_penalties(logits, p, prompt, {});
  EXPECT_EQ(logits, (std::vector<float>{4.0f, -0.5f, 0.0f, 3.0f}));
}

TEST(Penalties, PresenceAndFrequencyCountOutputTokensOnly) {
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, -3.0f, 4.0f, 1.0f};
  SamplingParams p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  const std::vector<int> prompt = {4, 4, 5};  // not penalised
  const std::vector<int> output = {2, 3, 2, 2};
  apply_penalties(logits, p, prompt, output);
  // id 2: 0.5 - 0.25 * 3 - 0.5 = -0.75; id 3: -3 - 0.25 - 0.5 = -3.75.
  EXPECT_EQ(logits, (std::vector<float>{2.0f, -1.0f, -0.75f, -3.75f, 4.0f, 1.0f}));
}

TEST(Penalties, NegativePresenceAndFrequencyEncourageRepeats) {
  std::vector<float> logits = {1.0f, 1.0f, 1.0f};
  SamplingParams p;
  p.presence_penalty = -1.0f;
  p.frequency_penalty = -0.5f;
  const std::vector<int> output = {1, 1};
  apply_penalties(logits, p, {}, output);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, 3.0f, 1.0f}));
}

TEST(Penalties, RepetitionRunsBeforePresenceAndFrequency) {
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, -3.0f, 4.0f, 1.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  const std::vector<int> prompt = {0, 1, 1};
  const std::vector<int> output = {2, 3, 2, 2, 0};
  apply_penalties(logits, p, prompt, output);
  // id 0: 2 / 2 - 0.25 - 0.5 = 0.25 (the other order would give (2 - 0.75) / 2 = 0.625)
  // id 1: -1 * 2 = -2;  id 2: 0.5 / 2 - 0.75 - 0.5 = -1;  id 3: -3 * 2 - 0.25 - 0.5 = -6.75
  EXPECT_EQ(logits, (std::vector<float>{0.25f, -2.0f, -1.0f, -6.75f, 4.0f, 1.0f}));
}

TEST(Penalties, ScratchIsLeftCleanForTheNextRow) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 1.0f;
  PenaltyScratch scratch;
  std::vector<float> a = {4.0f, 4.0f, 4.0f};
  const std::vector<int> out_a = {0, 0, 1};
  apply_penalties(a, p, {}, out_a, &scratch);
  EXPECT_EQ(a, (std::vector<float>{0.0f, 1.0f, 4.0f}));  // 4/2 - 2, 4/2 - 1
  // A second row with other tokens: nothing of the first row's counts or marks remains.
  std::vector<float> b = {4.0f, 4.0f, 4.0f};
  const std::vector<int> out_b = {2};
  apply_penalties(b, p, {}, out_b, &scratch);
  EXPECT_EQ(b, (std::vector<float>{4.0f, 4.0f, 1.0f}));
}

TEST(Penalties, NeutralParametersChangeNothing) {
  std::vector<float> logits = {2.0f, -1.0f, 0.5f};
  const std::vector<float> before = logits;
  const std::vector<int> ids = {0, 1, 2, 2};
  apply_penalties(logits, SamplingParams{}, ids, ids);
  EXPECT_EQ(logits, before);
  EXPECT_FALSE(has_penalties(SamplingParams{}));
}

TEST(Penalties, OutOfVocabIdThrows) {
  std::vector<float> logits = {2.0f, -1.0f, 0.5f};
  SamplingParams p;
  p.repetition_penalty = 1.5f;
  const std::vector<int> bad = {0, 3};
  EXPECT_THROW(apply_penalties(logits, p, bad, {}), Error);
  const std::vector<int> negative = {-1};
  EXPECT_THROW(apply_penalties(logits, p, {}, negative), Error);
}

TEST(MinTokens, MasksStopAndEosIdsUntilMinTokensAreGenerated) {
  SamplingParams p;
  p.min_tokens = 3;
  p.stop_token_ids = {2, 99};  // 99 is outside the vocab: skipped
  const std::vector<int> eos = {5};
  const std::vector<float> raw = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};

  std::vector<float> logits = raw;
  apply_min_tokens(logits, p, 2, eos);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, 2.0f, -kInf, 4.0f, 5.0f, -kInf}));

  logits = raw;
  apply_min_tokens(logits, p, 3, eos);  // min_tokens reached
  EXPECT_EQ(logits, raw);

  p.ignore_eos = true;  // EOS does not stop the sequence, so it stays sampleable
  logits = raw;
  apply_min_tokens(logits, p, 0, eos);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, 2.0f, -kInf, 4.0f, 5.0f, 6.0f}));
}

}  // namespace
}  // namespace kestrel
