// Structured outputs in the CPU sampler (SamplingRow::allowed): only allowed tokens come
// out, greedy takes the best allowed one, random draws follow the distribution renormalised
// over the allowed tokens (worked out here in double), and unmasked rows are unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "core/error.h"
#include "sampling/sampler.h"

namespace kestrel {
namespace {

std::vector<uint32_t> mask_of(int vocab, std::initializer_list<int> ids) {
  std::vector<uint32_t> m((vocab + 31) / 32, 0);
  for (int t : ids) m[t / 32] |= 1u << (t % 32);
  return m;
}

SamplingRow row_of(const SamplingParams& p, uint64_t seed, std::span<const uint32_t> allowed) {
  SamplingRow r{&p, seed, 0, {}, {}, {}};
  r.allowed = allowed;
  return r;
}

TEST(AllowedMask, GreedyTakesTheBestAllowedToken) {
  const int vocab = 70;
  std::vector<float> logits(vocab, 0.0f);
  logits[5] = 9.0f;   // best, not allowed
  logits[40] = 3.0f;  // best allowed
  logits[66] = 2.0f;
  SamplingParams p;
  p.temperature = 0.0f;
  const std::vector<uint32_t> m = mask_of(vocab, {40, 66, 1});
  logits.insert(logits.end(), logits.begin(), logits.end());  // row 1: the same logits
  const SamplingRow rows[] = {row_of(p, 1, m), row_of(p, 1, {})};
  const std::vector<SampledToken> out = sample(logits.data(), vocab, rows);
  EXPECT_EQ(out[0].token_id, 40);
  EXPECT_EQ(out[1].token_id, 5);  // the unmasked row is untouched
}

TEST(AllowedMask, DrawsFollowTheRenormalisedDistribution) {
  const int vocab = 40;
  std::vector<float> logits(vocab);
  for (int t = 0; t < vocab; ++t) logits[t] = 0.1f * t;
  SamplingParams p;
  p.temperature = 1.0f;
  const std::vector<uint32_t> m = mask_of(vocab, {3, 17, 33, 39});
  std::map<int, int> counts;
  const int n = 20000;
  for (int s = 0; s < n; ++s) {
    const SamplingRow rows[] = {row_of(p, uint64_t(s) * 7919 + 1, m)};
    ++counts[sample(logits.data(), vocab, rows)[0].token_id];
  }
  double z = 0.0;
  for (int t : {3, 17, 33, 39}) z += std::exp(0.1 * t);
  double chi2 = 0.0;
  for (const auto& [t, c] : counts) {
    ASSERT_TRUE(t == 3 || t == 17 || t == 33 || t == 39) << "token " << t << " is not allowed";
    const double e = n * std::exp(0.1 * t) / z;
    chi2 += (c - e) * (c - e) / e;
  }
  EXPECT_LT(chi2, 16.3);  // 3 degrees of freedom, p = 0.001
}

TEST(AllowedMask, TokensPastTheMaskAreNotAllowed) {
  const int vocab = 100;
  std::vector<float> logits(vocab, 0.0f);
  logits[99] = 50.0f;
  SamplingParams p;
  p.temperature = 0.0f;
  const std::vector<uint32_t> short_mask = {1u << 7};  // covers ids 0..31 only
  const SamplingRow rows[] = {row_of(p, 1, short_mask)};
  EXPECT_EQ(sample(logits.data(), vocab, rows)[0].token_id, 7);
}

TEST(AllowedMask, PenaltiesNeverReviveAMaskedToken) {
  const int vocab = 8;
  std::vector<float> logits = {-3, -3, -2, -2.5f, -5, -3, -3, -3};
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 0.01f;  // token 4 (in the output) would rise to -0.05, the best
  const std::vector<int> output = {4};
  const std::vector<uint32_t> m = mask_of(vocab, {2, 3});
  SamplingRow r{&p, 1, 0, {}, output, {}};
  r.allowed = m;
  EXPECT_EQ(sample(logits.data(), vocab, {&r, 1})[0].token_id, 2);
}

TEST(AllowedMask, AnEmptyAllowedSetIsAnError) {
  const int vocab = 40;
  std::vector<float> logits(vocab, 0.0f);
  SamplingParams p;
  const std::vector<uint32_t> none(2, 0);
  const SamplingRow rows[] = {row_of(p, 1, none)};
  EXPECT_THROW(sample(logits.data(), vocab, rows), Error);
}

}  // namespace
}  // namespace kestrel
