// Oracles: kept sets derived by hand in the comments (probabilities worked out on paper),
// and for a real-size vocab a plain full-sort reference written independently here.
#include "sampling/filters.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"

namespace kestrel {
namespace {

constexpr float kInf = INFINITY;

SamplingParams params(float temperature, int top_k, float top_p, float min_p) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

std::vector<float> logs(std::initializer_list<double> weights) {
  std::vector<float> v;
  for (double w : weights) v.push_back(static_cast<float>(std::log(w)));
  return v;
}

using Ids = std::vector<int>;

TEST(TopK, KeepsTheKLargestLogits) {
  const std::vector<float> l = {1.0f, 3.0f, 2.0f, 5.0f, 4.0f, 0.5f};
  EXPECT_EQ(kept_token_ids(l, params(1, 3, 1, 0)), (Ids{1, 3, 4}));
  EXPECT_EQ(kept_token_ids(l, params(1, 1, 1, 0)), (Ids{3}));
  EXPECT_EQ(kept_token_ids(l, params(1, 0, 1, 0)), (Ids{0, 1, 2, 3, 4, 5}));   // disabled
  EXPECT_EQ(kept_token_ids(l, params(1, -1, 1, 0)), (Ids{0, 1, 2, 3, 4, 5}));  // disabled
  EXPECT_EQ(kept_token_ids(l, params(1, 6, 1, 0)), (Ids{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(kept_token_ids(l, params(1, 100, 1, 0)), (Ids{0, 1, 2, 3, 4, 5}));
}

TEST(TopK, KeepsEveryTokenTiedWithTheKthLogit) {
  // Sorted: 5, 3, 3, 3, 2, 1. The 3rd largest is 3, and all three 3s stay.
  const std::vector<float> l = {2.0f, 5.0f, 3.0f, 3.0f, 3.0f, 1.0f};
  EXPECT_EQ(kept_token_ids(l, params(1, 3, 1, 0)), (Ids{1, 2, 3, 4}));
  EXPECT_EQ(kept_token_ids(l, params(1, 2, 1, 0)), (Ids{1, 2, 3, 4}));
  EXPECT_EQ(kept_token_ids(l, params(1, 5, 1, 0)), (Ids{0, 1, 2, 3, 4}));
}

TEST(TopP, KeepsTheSmallestPrefixReachingTheMass) {
  // Probabilities by id: 0.3, 0.05, 0.5, 0.15. Descending: id2 .5, id0 .8, id3 .95, id1 1.
  const std::vector<float> l = logs({3.0, 0.5, 5.0, 1.5});
  EXPECT_EQ(kept_token_ids(l, params(1, -1, 0.7f, 0)), (Ids{0, 2}));
  EXPECT_EQ(kept_token_ids(l, params(1, -1, 0.85f, 0)), (Ids{0, 2, 3}));
  EXPECT_EQ(kept_token_ids(l, params(1, -1, 0.96f, 0)), (Ids{0, 1, 2, 3}));
  EXPECT_EQ(kept_token_ids(l, params(1, -1, 0.4f, 0)), (Ids{2}));
}

TEST(TopP, ExactBoundaryStopsAtTheTokenThatReachesIt) {
  // Four equal logits: each probability is exactly 1/4 and the partial sums are exact.
  const std::vector<float> l = {7.0f, 7.0f, -kInf, 7.0f, 7.0f};
  EXPECT_EQ(kept_token_ids(l, params(1, -1, 0.5f, 0)), (Ids{0, 1}));  // 0.5 >= 0.5
  EXPECT_EQ(kept_token_ids(l, params(1, -1, 0.50001f, 0)), (Ids{0, 1, 3}));
  EXPECT_EQ(kept_token_ids(l, params(1, -1, 0.75f, 0)), (Ids{0, 1, 3}));
  EXPECT_EQ(kept_token_ids(l, params(1, -1, 1.0f, 0)), (Ids{0, 1, 3, 4}));
  // Ties in probability are ranked by ascending id, so the lowest ids are kept first.
  EXPECT_EQ(kept_token_ids(l, params(1, -1, 0.25f, 0)), (Ids{0}));
}

TEST(TopP, AlwaysKeepsTheMostLikelyToken) {
  const std::vector<float> l = {1.0f, 9.0f, 2.0f};
  EXPECT_EQ(kept_token_ids(l, params(1, -1, 1e-6f, 0)), (Ids{1}));
  // Even when that token alone is far below the mass asked for.
  const std::vector<float> flat = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.1f};
  EXPECT_EQ(kept_token_ids(flat, params(1, -1, 0.01f, 0)), (Ids{7}));
}

TEST(TopP, AppliesAfterTemperature) {
  // Logits 2ln4, 2ln2, 0. T=1: probs 16/21, 4/21, 1/21 = .762, .190, .048 -> top_p .75
  // keeps id 0. T=2: weights 4, 2, 1 -> .571, .857 -> keeps ids 0 and 1.
  const std::vector<float> l = logs({16.0, 4.0, 1.0});
  EXPECT_EQ(kept_token_ids(l, params(1, -1, 0.75f, 0)), (Ids{0}));
  EXPECT_EQ(kept_token_ids(l, params(2, -1, 0.75f, 0)), (Ids{0, 1}));
}

TEST(MinP, DropsTokensBelowTheFractionOfTheTopProbability) {
  // Ratios to the top probability: 1, .5, .2, .1, .05.
  const std::vector<float> l = logs({10.0, 5.0, 2.0, 1.0, 0.5});
  EXPECT_EQ(kept_token_ids(l, params(1, -1, 1, 0.15f)), (Ids{0, 1, 2}));
  EXPECT_EQ(kept_token_ids(l, params(1, -1, 1, 0.45f)), (Ids{0, 1}));
  EXPECT_EQ(kept_token_ids(l, params(1, -1, 1, 0.01f)), (Ids{0, 1, 2, 3, 4}));
  // T = 0.5 squares the ratios: 1, .25, .04, .01, .0025.
  EXPECT_EQ(kept_token_ids(l, params(0.5f, -1, 1, 0.15f)), (Ids{0, 1}));
  // Boundary: ties with the top have ratio exactly 1 and survive min_p = 1.
  const std::vector<float> tied = {3.0f, 3.0f, 1.0f};
  EXPECT_EQ(kept_token_ids(tied, params(1, -1, 1, 1.0f)), (Ids{0, 1}));
}

TEST(Filters, TopPRenormalisesOverTopK) {
  // Probabilities .4, .3, .2, .1. top_k 3 leaves .444, .333, .222: top_p .75 stops after
  // two (.778). On the unrenormalised .4, .7, .9 it would have kept three.
  const std::vector<float> l = logs({0.4, 0.3, 0.2, 0.1});
  EXPECT_EQ(kept_token_ids(l, params(1, 3, 0.75f, 0)), (Ids{0, 1}));
  EXPECT_EQ(kept_token_ids(l, params(1, -1, 0.75f, 0)), (Ids{0, 1, 2}));
}

TEST(Filters, TopKTopPAndMinPCombine) {
  // top_k 3: {0,1,2}; top_p .95 on .444/.778/1.0 keeps all three; min_p .6 drops id 2
  // (ratio .2/.4 = .5) and keeps id 1 (ratio .75).
  const std::vector<float> l = logs({0.4, 0.3, 0.2, 0.1});
  EXPECT_EQ(kept_token_ids(l, params(1, 3, 0.95f, 0.6f)), (Ids{0, 1}));
  // Same logits permuted: the kept set follows the ids.
  const std::vector<float> perm = logs({0.1, 0.2, 0.4, 0.3});
  EXPECT_EQ(kept_token_ids(perm, params(1, 3, 0.95f, 0.6f)), (Ids{2, 3}));
}

TEST(Filters, RejectsRowsWithoutAFiniteLogit) {
  const std::vector<float> l = {-kInf, -kInf};
  EXPECT_THROW(kept_token_ids(l, params(1, -1, 1, 0)), Error);
}

// Independent reference: weights as specified, then a full sort for top_k and top_p.
std::vector<int> reference_kept(const std::vector<float>& l, const SamplingParams& p) {
  const size_t v = l.size();
  const float max = *std::max_element(l.begin(), l.end());
  std::vector<float> w(v);
  for (size_t i = 0; i < v; ++i) w[i] = std::exp((l[i] - max) / p.temperature);
  std::vector<int> order(v);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
  std::vector<bool> keep(v, true);
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < v) {
    for (size_t i = 0; i < v; ++i) keep[i] = l[i] >= l[order[p.top_k - 1]];
  }
  if (p.top_p < 1.0f) {
    // By probability; equal probabilities by ascending id.
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return w[a] > w[b]; });
    double mass = 0;
    for (size_t i = 0; i < v; ++i) mass += keep[i] && w[i] > 0 ? w[i] : 0.0;
    double cum = 0;
    bool reached = false;
    for (int id : order) {
      if (!keep[id] || w[id] == 0) continue;
      if (reached) {
        keep[id] = false;
        continue;
      }
      cum += w[id];
      reached = cum >= p.top_p * mass;
    }
  }
  std::vector<int> ids;
  for (size_t i = 0; i < v; ++i) {
    if (keep[i] && w[i] > 0 && w[i] >= p.min_p) ids.push_back(static_cast<int>(i));
  }
  return ids;
}

TEST(Filters, MatchAFullSortReferenceOnARealSizeVocab) {
  std::mt19937 gen(1234);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> l(151936);
  for (float& x : l) x = normal(gen);
  const SamplingParams cases[] = {
      params(0.7f, -1, 0.9f, 0), params(1.0f, 50, 0.95f, 0.05f), params(1.3f, -1, 0.999f, 0),
      params(0.6f, 20, 1.0f, 0), params(1.0f, -1, 1.0f, 0.02f),  params(2.0f, 5000, 0.8f, 0.001f),
  };
  for (const SamplingParams& p : cases) {
    const auto got = kept_token_ids(l, p);
    const auto want = reference_kept(l, p);
    EXPECT_GT(want.size(), 1u);
    EXPECT_EQ(got, want) << "T=" << p.temperature << " k=" << p.top_k << " p=" << p.top_p
                         << " min_p=" << p.min_p;
  }
}

TEST(Filters, MatchTheReferenceWhenManyProbabilitiesTie) {
  // Logits on a coarse grid: thousands of exactly equal probabilities around every cut, so
  // which tied ids survive top_k/top_p is decided by the tie rules alone.
  std::mt19937 gen(99);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> l(40000);
  for (float& x : l) x = std::round(normal(gen) * 2.0f) * 0.5f;
  for (const SamplingParams& p : {params(1.0f, -1, 0.5f, 0), params(0.8f, -1, 0.93f, 0),
                                  params(1.0f, 700, 0.9f, 0), params(1.0f, -1, 0.3f, 0.1f)}) {
    EXPECT_EQ(kept_token_ids(l, p), reference_kept(l, p))
        << "T=" << p.temperature << " k=" << p.top_k << " p=" << p.top_p;
  }
}

TEST(Argmax, FindsTheLowestIdOfTheMaximumInBodyAndTail) {
  std::vector<float> v(37);
  for (int i = 0; i < 37; ++i) v[i] = static_cast<float>((i * 7) % 37) * 0.1f;  // max 3.6
  const int top = static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
  EXPECT_EQ(argmax(v), top);
  v[35] = 9.0f;  // in the tail past the 16-wide lanes
  EXPECT_EQ(argmax(v), 35);
  v[20] = 9.0f;  // a tie in another lane: the lower id wins
  EXPECT_EQ(argmax(v), 20);
  v[4] = NAN;  // NaN is never the maximum
  EXPECT_EQ(argmax(v), 20);
  EXPECT_EQ(max_value(v), 9.0f);
  const std::vector<float> masked = {-kInf, -kInf, -kInf};
  EXPECT_EQ(argmax(masked), 0);
}

TEST(DrawToken, InverseCdfInAscendingIdOrderSkipsZeroWeights) {
  // Weights 0, 1, 0, 3 -> total 4: u in [0, .25) picks id 1, [.25, 1) picks id 3.
  const std::vector<float> w = {0.0f, 1.0f, 0.0f, 3.0f};
  EXPECT_EQ(draw_token(w, 0.0f), 1);
  EXPECT_EQ(draw_token(w, 0.2499f), 1);
  EXPECT_EQ(draw_token(w, 0.25f), 3);
  EXPECT_EQ(draw_token(w, 0.9999999f), 3);
  const std::vector<float> tail = {2.0f, 2.0f, 0.0f};
  EXPECT_EQ(draw_token(tail, 0.5f), 1);  // cum 2 is not > 2, so id 1
}

}  // namespace
}  // namespace kestrel
