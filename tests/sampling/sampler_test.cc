// Oracles: hand-derived expected tokens; the renormalised kept distribution worked out in
// double here (chi-square on many seeds); an inverse CDF written here over uniform01.
#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/philox.h"

namespace kestrel {
namespace {

constexpr float kInf = INFINITY;

// Owns what a SamplingRow points to.
struct RowData {
  SamplingParams params;
  uint64_t seed = 0;
  int64_t position = 0;
  std::vector<int> prompt = {1, 2, 3};
  std::vector<int> output;
  std::vector<int> eos;
  SamplingRow row() const { return {&params, seed, position, prompt, output, eos}; }
};

std::vector<SampledToken> sample_rows(const std::vector<float>& logits, int vocab,
                                      const std::vector<const RowData*>& data) {
  std::vector<SamplingRow> rows;
  for (const RowData* d : data) rows.push_back(d->row());
  return sample(logits.data(), vocab, rows);
}

int sample_one(const std::vector<float>& logits, const RowData& d) {
  return sample_rows(logits, static_cast<int>(logits.size()), {&d})[0].token_id;
}

TEST(Sampler, GreedyTakesTheArgmaxAndTiesGoToTheLowestId) {
  RowData d;
  d.params.temperature = 0.0f;
  EXPECT_EQ(sample_one({1.0f, 5.0f, 3.0f, 5.0f, 5.0f}, d), 1);
  EXPECT_EQ(sample_one({-2.0f, -1.0f, -1.0f}, d), 1);
  EXPECT_EQ(sample_one({7.0f, -kInf, 7.0f}, d), 0);
  // Seeds, positions and filters do not matter.
  d.seed = 99;
  d.position = 1234;
  d.params.top_k = 1;
  d.params.top_p = 0.1f;
  EXPECT_EQ(sample_one({1.0f, 5.0f, 3.0f, 5.0f, 5.0f}, d), 1);
}

TEST(Sampler, GreedyRunsOnPenalisedLogits) {
  RowData d;
  d.params.temperature = 0.0f;
  d.params.repetition_penalty = 2.0f;
  d.prompt = {2};  // id 2 drops from 1 to 0.5: still last
  d.output = {0};
  // id 0: 3 / 2 = 1.5 < 2 = id 1.
  EXPECT_EQ(sample_one({3.0f, 2.0f, 1.0f}, d), 1);
  d.params.repetition_penalty = 1.0f;
  d.params.presence_penalty = 1.5f;  // 3 - 1.5 = 1.5 < 2
  EXPECT_EQ(sample_one({3.0f, 2.0f, 1.0f}, d), 1);
  d.params.presence_penalty = 0.5f;  // 2.5 > 2
  EXPECT_EQ(sample_one({3.0f, 2.0f, 1.0f}, d), 0);
}

// logit_bias goes after min_tokens and before the penalties (vLLM's order), and logprobs
// stay those of the raw logits.
TEST(Sampler, LogitBiasIsAddedBeforeThePenalties) {
  RowData d;
  d.params.temperature = 0.0f;
  d.params.logit_bias = {{2, 1.5f}};
  EXPECT_EQ(sample_one({3.0f, 2.0f, 2.0f}, d), 2);  // 3.5 > 3
  d.params.logit_bias = {{0, -100.0f}};
  EXPECT_EQ(sample_one({3.0f, 2.0f, 1.0f}, d), 1);  // banned
  // Biased first: id 0 (in the output) is (2 + 2) / 2 = 2 < 2.5 = id 1; the other order,
  // 2 / 2 + 2 = 3, would pick id 0.
  d.params.logit_bias = {{0, 2.0f}};
  d.params.repetition_penalty = 2.0f;
  d.prompt = {};
  d.output = {0};
  EXPECT_EQ(sample_one({2.0f, 2.5f, 1.0f}, d), 1);
  // min_tokens' -inf stays -inf whatever the bias.
  d.params = SamplingParams{};
  d.params.temperature = 0.0f;
  d.params.min_tokens = 2;
  d.params.stop_token_ids = {1};
  d.params.logit_bias = {{1, 100.0f}};
  EXPECT_EQ(sample_one({3.0f, 2.0f, 1.0f}, d), 0);
  // Logprobs come from the raw logits: the biased pick has its raw logprob.
  d.params = SamplingParams{};
  d.params.temperature = 0.0f;
  d.params.logprobs = 0;
  d.params.logit_bias = {{1, 10.0f}};
  const std::vector<float> raw = {1.0f, 0.0f};
  const SampledToken t = sample_rows(raw, 2, {&d})[0];
  EXPECT_EQ(t.token_id, 1);
  ASSERT_TRUE(t.logprobs.has_value());
  EXPECT_NEAR(t.logprobs->logprob, -std::log1p(std::exp(1.0)), 1e-6);
}

TEST(Sampler, MinTokensHoldsBackEosAndStopIds) {
  const std::vector<float> logits = {1.0f, 2.0f, 9.0f, 8.0f, 3.0f};
  RowData d;
  d.params.temperature = 0.0f;
  d.params.min_tokens = 2;
  d.params.stop_token_ids = {3};
  d.eos = {2};
  d.output = {4};  // 1 generated < 2: EOS (9) and stop id 3 (8) are masked
  EXPECT_EQ(sample_one(logits, d), 4);
  d.output = {4, 4};  // min_tokens reached
  EXPECT_EQ(sample_one(logits, d), 2);
  d.output = {4};
  d.params.ignore_eos = true;  // EOS is not a stop, so only the stop id is masked
  EXPECT_EQ(sample_one(logits, d), 2);

  // Random sampling never draws a masked id, although it holds almost all the mass.
  d.params.ignore_eos = false;
  d.params.temperature = 1.0f;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    d.seed = seed;
    const int t = sample_one(logits, d);
    ASSERT_NE(t, 2);
    ASSERT_NE(t, 3);
  }
}

// Draws `n` tokens with seeds 0..n-1 (positions vary too) and returns the counts.
std::vector<int> histogram(const std::vector<float>& logits, RowData d, int n) {
  const int vocab = static_cast<int>(logits.size());
  std::vector<RowData> data(n, d);
  std::vector<float> batch;
  std::vector<const RowData*> ptrs;
  for (int i = 0; i < n; ++i) {
    data[i].seed = static_cast<uint64_t>(i) * 7919u + 11u;
    data[i].position = 100 + i % 37;
    ptrs.push_back(&data[i]);
    batch.insert(batch.end(), logits.begin(), logits.end());
  }
  std::vector<int> counts(vocab, 0);
  for (const SampledToken& t : sample_rows(batch, vocab, ptrs)) ++counts[t.token_id];
  return counts;
}

double chi_square(const std::vector<int>& counts, const std::vector<double>& probs, int n) {
  double chi2 = 0.0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] == 0.0) continue;
    const double e = probs[i] * n;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi2;
}

TEST(Sampler, EmpiricalDistributionMatchesTheRenormalisedKeptSet) {
  // T = .8. top_k 4 keeps ids 1 (2.0), 3 (1.5), 0 (1.0), 2 (0.5) with probabilities
  // .506, .271, .145, .078; top_p .85 stops at .922 after id 0. Kept: {0, 1, 3}.
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, 1.5f, -1.0f, 0.2f};
  RowData d;
  d.params.temperature = 0.8f;
  d.params.top_k = 4;
  d.params.top_p = 0.85f;
  constexpr int kN = 20000;
  const auto counts = histogram(logits, d, kN);
  std::vector<double> probs(6, 0.0);
  double z = 0.0;
  for (int id : {0, 1, 3}) z += probs[id] = std::exp((logits[id] - 2.0) / 0.8);
  for (double& p : probs) p /= z;
  EXPECT_EQ(counts[2] + counts[4] + counts[5], 0);
  // df = 2; 18.4 is the 1e-4 upper tail.
  EXPECT_LT(chi_square(counts, probs, kN), 18.4);
}

TEST(Sampler, EmpiricalDistributionWithoutFiltersIsTheSoftmax) {
  std::vector<float> logits(50);
  for (int i = 0; i < 50; ++i) logits[i] = 0.15f * static_cast<float>((i * 17) % 50) - 3.0f;
  RowData d;
  d.params.temperature = 1.3f;
  constexpr int kN = 50000;
  const auto counts = histogram(logits, d, kN);
  std::vector<double> probs(50);
  double z = 0.0;
  for (int i = 0; i < 50; ++i) z += probs[i] = std::exp(logits[i] / 1.3);
  for (double& p : probs) p /= z;
  // df = 49; 94.8 is the 1e-4 upper tail (Wilson-Hilferty).
  EXPECT_LT(chi_square(counts, probs, kN), 94.8);
}

TEST(Sampler, DrawIsTheInverseCdfAtUniform01OfSeedAndPosition) {
  // Real vocab, no filters: weights exp((l - max) / T) accumulated here in id order.
  constexpr int kVocab = 151936;
  std::mt19937 gen(77);
  std::normal_distribution<float> normal(0.0f, 2.5f);
  std::vector<float> logits(kVocab);
  for (float& x : logits) x = normal(gen);
  const float max = *std::max_element(logits.begin(), logits.end());
  RowData d;
  d.params.temperature = 0.9f;
  std::vector<double> cdf(kVocab);
  double cum = 0.0;
  for (int i = 0; i < kVocab; ++i) cdf[i] = cum += std::exp((logits[i] - max) / 0.9f);
  for (uint64_t seed = 0; seed < 40; ++seed) {
    d.seed = seed * 1000003u;
    d.position = static_cast<int64_t>(seed) * 13;
    const double target = uniform01(d.seed, d.position, 0) * cum;
    const int want =
        static_cast<int>(std::upper_bound(cdf.begin(), cdf.end(), target) - cdf.begin());
    EXPECT_EQ(sample_one(logits, d), want) << "seed " << d.seed;
  }
}

TEST(Sampler, SameSeedAndPositionGiveTheSameTokenWhateverTheBatch) {
  constexpr int kVocab = 1000;
  constexpr int kRows = 48;
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<std::vector<float>> logits(kRows, std::vector<float>(kVocab));
  std::vector<RowData> data(kRows);
  for (int r = 0; r < kRows; ++r) {
    for (float& x : logits[r]) x = normal(gen);
    data[r].seed = 1000u + r;
    data[r].position = 10 + r;
    data[r].params.temperature = 0.5f + 0.05f * (r % 10);
    data[r].params.top_k = (r % 3 == 0) ? 40 : -1;
    data[r].params.top_p = (r % 4 == 0) ? 0.9f : 1.0f;
    data[r].params.repetition_penalty = (r % 5 == 0) ? 1.3f : 1.0f;
    data[r].output = {r, r + 1, r};
  }
  auto run = [&](const std::vector<int>& order) {
    std::vector<float> batch;
    std::vector<const RowData*> ptrs;
    for (int r : order) {
      batch.insert(batch.end(), logits[r].begin(), logits[r].end());
      ptrs.push_back(&data[r]);
    }
    std::vector<int> tokens(kRows, -1);
    const auto out = sample_rows(batch, kVocab, ptrs);
    for (size_t i = 0; i < order.size(); ++i) tokens[order[i]] = out[i].token_id;
    return tokens;
  };
  std::vector<int> all(kRows);
  for (int r = 0; r < kRows; ++r) all[r] = r;
  const auto reference = run(all);
  std::vector<int> reversed(all.rbegin(), all.rend());
  EXPECT_EQ(run(reversed), reference);
  std::vector<int> shuffled = all;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(3));
  shuffled.resize(17);  // a smaller batch in another order
  const auto partial = run(shuffled);
  for (int r : shuffled) EXPECT_EQ(partial[r], reference[r]) << "row " << r;
  for (int r : {0, 7, 31}) EXPECT_EQ(run({r})[r], reference[r]) << "row " << r;
}

TEST(Sampler, SeedAndPositionEachChangeTheDraw) {
  std::vector<float> logits(64);
  for (int i = 0; i < 64; ++i) logits[i] = 0.01f * static_cast<float>(i);  // near uniform
  RowData d;
  std::vector<int> by_seed, by_position;
  for (int i = 0; i < 100; ++i) {
    d.seed = static_cast<uint64_t>(i);
    d.position = 5;
    by_seed.push_back(sample_one(logits, d));
    d.seed = 5;
    d.position = i;
    by_position.push_back(sample_one(logits, d));
  }
  std::sort(by_seed.begin(), by_seed.end());
  std::sort(by_position.begin(), by_position.end());
  // 100 near-uniform draws over 64 tokens hit many distinct ids.
  EXPECT_GT(std::unique(by_seed.begin(), by_seed.end()) - by_seed.begin(), 30);
  EXPECT_GT(std::unique(by_position.begin(), by_position.end()) - by_position.begin(), 30);
}

TEST(Sampler, RejectsBadRows) {
  const std::vector<float> logits = {1.0f, 2.0f};
  auto expect_throws = [&](auto&& edit) {
    RowData d;
    edit(d);
    EXPECT_THROW(sample_one(logits, d), Error);
  };
  expect_throws([](RowData& d) { d.params.temperature = -0.5f; });
  expect_throws([](RowData& d) { d.params.top_k = -2; });
  expect_throws([](RowData& d) { d.params.top_p = 0.0f; });
  expect_throws([](RowData& d) { d.params.top_p = 1.5f; });
  expect_throws([](RowData& d) { d.params.min_p = 1.5f; });
  expect_throws([](RowData& d) { d.params.repetition_penalty = 0.0f; });
  expect_throws([](RowData& d) { d.params.logprobs = -1; });
  expect_throws([](RowData& d) { d.position = -1; });
  expect_throws([](RowData& d) {
    d.params.repetition_penalty = 1.2f;
    d.output = {2};  // outside the vocab of 2
  });
  SamplingRow null_params{};
  EXPECT_THROW(sample(logits.data(), 2, std::span<const SamplingRow>(&null_params, 1)), Error);
  RowData d;
  EXPECT_THROW(sample_one({-kInf, -kInf}, d), Error);
  EXPECT_TRUE(sample(nullptr, 2, {}).empty());
}

}  // namespace
}  // namespace kestrel
