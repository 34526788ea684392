// Test helpers for tensor parallelism: runs prompts through a model (prefill logits at
// every position, then greedy tokens) on one backend, or through N ranks as threads
// (thread_communicator.h), and compares the ranks with the unsharded model.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "model/causal_lm.h"
#include "paged_runner.h"
#include "thread_communicator.h"

namespace kestrel::test {

// Against the unsharded model on the same backend. Both are fp32; only the order of the
// sums differs (o_proj, down_proj and the embedding add N partial products instead of one
// dot product), so the rows differ by rounding alone. Measured on the HF fixtures (the
// larger of relative L2 and max-relative error per row, printed by the test): 0 on one
// rank, at most 1.4e-6 on 2 and 4 ranks. 1e-5 leaves a margin of about 7x and still
// catches a wrong slice or a bias added twice, which are off by far more.
constexpr double kSingleTolerance = 1e-5;

// ||a - b|| / ||b|| and max |a - b| / max |b| of one logits row; the larger of the two.
inline double row_error(const std::vector<float>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return INFINITY;
  double diff2 = 0, ref2 = 0, max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(got[i] - want[i]);
    diff2 += d * d;
    ref2 += want[i] * want[i];
    max_diff = std::max(max_diff, std::isnan(d) ? INFINITY : d);
    max_ref = std::max(max_ref, std::abs(want[i]));
  }
  return std::max(std::sqrt(diff2 / ref2), max_diff / max_ref);
}

inline std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// What one model (or one rank of a sharded one) produces for a set of prompts: the prefill
// logits at every position, then `greedy_len` greedy tokens continuing in the same cache.
struct Outputs {
  std::vector<std::vector<std::vector<float>>> logits;  // [prompt][position][V]
  std::vector<std::vector<int>> greedy;                 // [prompt][greedy_len]
};

inline Outputs run_prompts(CausalLM& model, Backend& backend,
                           const std::vector<std::vector<int>>& prompts, size_t greedy_len) {
  Outputs out;
  for (size_t p = 0; p < prompts.size(); ++p) {
    PagedRunner runner(model, backend, 32, 4, 7 + p);  // room for prompt + greedy_len
    const int seq = runner.add_sequence();
    out.logits.push_back(runner.step({{seq, prompts[p]}}, /*all_rows=*/true));
    std::vector<int> tokens;
    if (greedy_len > 0) tokens.push_back(argmax(out.logits.back().back()));
    while (tokens.size() < greedy_len) {
      tokens.push_back(argmax(runner.step({{seq, {tokens.back()}}}, false)[0]));
    }
    out.greedy.push_back(tokens);
  }
  return out;
}

// The same on `world_size` ranks: one Outputs per rank.
inline std::vector<Outputs> run_tensor_parallel(const std::string& dir, int world_size,
                                                const std::vector<std::vector<int>>& prompts,
                                                size_t greedy_len) {
  std::vector<Outputs> out(world_size);
  run_ranks(world_size, [&](ThreadCommunicator& comm) {
    CpuBackend backend(1);
    auto model = CausalLM::load(dir, backend, &comm);
    out[comm.rank()] = run_prompts(*model, backend, prompts, greedy_len);
  });
  return out;
}

// Every rank's outputs equal rank 0's exactly (the gather hands every rank the same
// logits), and rank 0's logits are within kSingleTolerance of the unsharded model's.
// Returns the largest error against the unsharded model.
inline double expect_ranks_match_single(const std::vector<Outputs>& tp, const Outputs& single,
                                        const std::string& where) {
  for (size_t r = 1; r < tp.size(); ++r) {
    EXPECT_TRUE(tp[r].logits == tp[0].logits) << where << ": rank " << r << "'s logits";
    EXPECT_EQ(tp[r].greedy, tp[0].greedy) << where << ": rank " << r << "'s tokens";
  }
  double worst = 0;
  EXPECT_EQ(tp[0].logits.size(), single.logits.size()) << where;
  for (size_t p = 0; p < std::min(tp[0].logits.size(), single.logits.size()); ++p) {
    EXPECT_EQ(tp[0].logits[p].size(), single.logits[p].size()) << where << " prompt " << p;
    for (size_t t = 0; t < std::min(tp[0].logits[p].size(), single.logits[p].size()); ++t) {
      const double e = row_error(tp[0].logits[p][t], as_double(single.logits[p][t]));
      worst = std::max(worst, e);
      EXPECT_LE(e, kSingleTolerance) << where << " prompt " << p << " position " << t;
    }
  }
  return worst;
}

}  // namespace kestrel::test
