#include "sampling/filters.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace kestrel {

namespace {

// Below this many candidates top_p just sorts what is left.
constexpr size_t kTopPSortBelow = 64;

// Zeroes the weights of tokens below the k-th largest logit.
void apply_top_k(std::span<const float> logits, int k, FilterScratch& s) {
  const size_t vocab = logits.size();
  if (k <= 0 || static_cast<size_t>(k) >= vocab) return;
  s.values.assign(logits.begin(), logits.end());
  auto nth = s.values.begin() + (k - 1);
  std::nth_element(s.values.begin(), nth, s.values.end(), std::greater<float>());
  const float kth = *nth;
  for (size_t i = 0; i < vocab; ++i) {
    if (logits[i] < kth) s.weights[i] = 0.0f;
  }
}

// Keeps the shortest prefix of the candidates, ranked by (weight desc, id asc), whose mass
// reaches top_p of the total. A quickselect on mass: each pass partitions the undecided
// range around a pivot and keeps or drops the whole upper part by its mass, so the expected
// cost is O(vocab) however many tokens are kept (a sort would be O(m log m)).
void apply_top_p(float top_p, size_t vocab, FilterScratch& s) {
  if (top_p >= 1.0f) return;
  const float* w = s.weights.data();
  std::vector<int>& c = s.ids;
  c.clear();
  double mass = 0.0;
  for (size_t i = 0; i < vocab; ++i) {
    if (w[i] > 0.0f) {
      c.push_back(static_cast<int>(i));
      mass += w[i];
    }
  }
  const double target = static_cast<double>(top_p) * mass;
  auto before = [w](int a, int b) { return w[a] > w[b] || (w[a] == w[b] && a < b); };

  // Invariant: c[0, lo) are kept, with mass `kept_mass` < target; c[hi, end) are dropped.
  size_t lo = 0, hi = c.size(), kept = c.size();
  double kept_mass = 0.0;
  bool decided = false;
  while (!decided && hi - lo > kTopPSortBelow) {
    // Median of three keeps the expected depth logarithmic on sorted or flat inputs.
    int a = c[lo], b = c[lo + (hi - lo) / 2], d = c[hi - 1];
    if (before(b, a)) std::swap(a, b);
    if (before(d, b)) std::swap(b, d);
    if (before(b, a)) std::swap(a, b);
    const int pivot = b;
    auto upper_end =
        std::partition(c.begin() + lo, c.begin() + hi, [&](int x) { return before(x, pivot); });
    const size_t m = static_cast<size_t>(upper_end - c.begin());
    double upper_mass = 0.0;
    for (size_t j = lo; j < m; ++j) upper_mass += w[c[j]];
    if (kept_mass + upper_mass >= target) {
      hi = m;  // the cut lies among the tokens ranked above the pivot
      continue;
    }
    kept_mass += upper_mass;
    // The pivot ranks right after c[lo, m): move it to m and take it.
    std::iter_swap(upper_end, std::find(upper_end, c.begin() + hi, pivot));
    kept_mass += w[pivot];
    lo = m + 1;
    if (kept_mass >= target) {
      kept = lo;
      decided = true;
    }
  }
  if (!decided) {
    std::sort(c.begin() + lo, c.begin() + hi, before);
    kept = hi;  // when rounding leaves the target unreached, keep the whole range
    for (size_t j = lo; j < hi; ++j) {
      kept_mass += w[c[j]];
      if (kept_mass >= target) {
        kept = j + 1;
        break;
      }
    }
  }
  // The most likely token is ranked first, so it is kept whatever top_p is.
  for (size_t j = kept; j < c.size(); ++j) s.weights[c[j]] = 0.0f;
}

}  // namespace

float max_value(std::span<const float> values) {
  constexpr size_t kLanes = 16;
  float lane[kLanes];
  std::fill(lane, lane + kLanes, -std::numeric_limits<float>::infinity());
  const size_t n = values.size(), body = n - n % kLanes;
  for (size_t i = 0; i < body; i += kLanes) {
    for (size_t l = 0; l < kLanes; ++l) {
      lane[l] = values[i + l] > lane[l] ? values[i + l] : lane[l];
    }
  }
  for (size_t i = body; i < n; ++i) lane[0] = values[i] > lane[0] ? values[i] : lane[0];
  float m = lane[0];
  for (size_t l = 1; l < kLanes; ++l) m = lane[l] > m ? lane[l] : m;
  return m;
}

int argmax(std::span<const float> values) {
  const float m = max_value(values);
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] == m) return static_cast<int>(i);
  }
  return 0;  // every value is NaN
}

void compute_kept_weights(std::span<const float> logits, const SamplingParams& params,
                          FilterScratch& s) {
  const size_t vocab = logits.size();
  KS_ASSERT(params.temperature > 0.0f);
  const float max = max_value(logits);
  KS_CHECK(std::isfinite(max), "sampling needs a finite logit; the largest is {}", max);
  s.weights.resize(vocab);
  const float t = params.temperature;
  for (size_t i = 0; i < vocab; ++i) s.weights[i] = std::exp((logits[i] - max) / t);

  apply_top_k(logits, params.top_k, s);
  apply_top_p(params.top_p, vocab, s);
  // The most likely token survives top_k and top_p with weight exactly exp(0) = 1, and the
  // filters above only rescale the distribution, so p / p_max is the weight itself.
  if (params.min_p > 0.0f) {
    for (size_t i = 0; i < vocab; ++i) {
      if (s.weights[i] < params.min_p) s.weights[i] = 0.0f;
    }
  }
}

int draw_token(std::span<const float> weights, float u) {
  double total = 0.0;
  for (float w : weights) total += w;
  KS_ASSERT(total > 0.0, "no token left to sample");
  const double target = static_cast<double>(u) * total;
  double cum = 0.0;
  int last_kept = -1;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0.0f) continue;
    cum += weights[i];
    if (cum > target) return static_cast<int>(i);
    last_kept = static_cast<int>(i);
  }
  return last_kept;  // only when rounding kept cum <= target to the end
}

std::vector<int> kept_token_ids(std::span<const float> logits, const SamplingParams& params) {
  KS_CHECK(params.temperature > 0.0f, "kept_token_ids needs temperature > 0");
  FilterScratch s;
  compute_kept_weights(logits, params, s);
  std::vector<int> ids;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (s.weights[i] > 0.0f) ids.push_back(static_cast<int>(i));
  }
  return ids;
}

}  // namespace kestrel
