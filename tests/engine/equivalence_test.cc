// The engine's outputs must not depend on how it is configured: chunked prefill on/off,
// prefix caching on/off, a roomy or a tiny KV cache (forcing preemption), small or large
// token budgets and sequence caps, host/device overlap on/off all give the reference's
// tokens.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "engine_harness.h"

namespace kestrel::testing {
namespace {

struct Arrival {
  int step = 0;  // added before this step
  std::string id;
  std::vector<int> prompt;
  SamplingParams params;
};

std::vector<Arrival> make_workload(uint32_t seed, int vocab) {
  std::mt19937 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const std::vector<std::vector<int>> prefixes = {make_prompt(9, seed, vocab),
                                                  make_prompt(17, seed + 1, vocab)};
  std::vector<Arrival> w;
  for (int i = 0; i < 14; ++i) {
    Arrival a;
    a.step = i < 6 ? 0 : uniform(0, 12);
    a.id = fmt::format("q{}", i);
    if (uniform(0, 2) > 0) a.prompt = prefixes[uniform(0, 1)];
    const std::vector<int> tail = make_prompt(uniform(1, 12), seed * 100 + i, vocab);
    a.prompt.insert(a.prompt.end(), tail.begin(), tail.end());
    a.params = seeded(seed * 1000 + i, uniform(1, 14), /*ignore_eos=*/uniform(0, 1) == 1);
    a.params.min_tokens = uniform(0, 1);
    a.params.n = uniform(0, 3) == 0 ? 2 : 1;
    // Each makes the overlapped engine settle before it schedules on (the fake model's
    // tokens do not depend on them).
    if (uniform(0, 5) == 0) a.params.presence_penalty = 0.5f;
    if (uniform(0, 5) == 0) a.params.stop_token_ids = {uniform(1, vocab - 1)};
    w.push_back(std::move(a));
  }
  std::stable_sort(w.begin(), w.end(),
                   [](const Arrival& a, const Arrival& b) { return a.step < b.step; });
  return w;
}

struct Config {
  bool chunked, caching;
  int num_kv_blocks, max_num_batched_tokens, max_num_seqs;
};

TEST(Equivalence, EveryConfigurationGivesTheReferenceTokens) {
  const std::vector<Config> configs = {
      {true, true, 256, 64, 8},   {true, false, 256, 64, 8}, {false, true, 256, 64, 8},
      {false, false, 256, 64, 8}, {true, true, 11, 64, 8},   {true, false, 11, 64, 8},
      {false, true, 11, 32, 8},   {false, false, 11, 32, 8}, {true, true, 256, 5, 2},
      {true, false, 11, 3, 3},    {true, true, 9, 16, 1},    {false, true, 256, 30, 1},
  };
  int64_t total_preemptions = 0, total_hits = 0, total_pending = 0;
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    for (const Config& c : configs) {
      for (bool overlap : {false, true}) {
        EngineLimits l = small_limits();
        l.async_scheduling = overlap;
        l.vocab_size = 50;  // EOS (0) comes up now and then
        l.enable_chunked_prefill = c.chunked;
        l.enable_prefix_caching = c.caching;
        l.num_kv_blocks = c.num_kv_blocks;
        l.max_num_batched_tokens = c.max_num_batched_tokens;
        l.max_num_seqs = c.max_num_seqs;
        SCOPED_TRACE(fmt::format(
            "seed {} chunked {} caching {} blocks {} budget {} seqs {} overlap {}", seed, c.chunked,
            c.caching, c.num_kv_blocks, c.max_num_batched_tokens, c.max_num_seqs, overlap));
        Harness h(l);
        const int max_len = expected_max_model_len(l);
        const std::vector<Arrival> workload = make_workload(seed, l.vocab_size);
        size_t next = 0;
        for (int step = 0; next < workload.size() || h.engine.has_unfinished(); ++step) {
          ASSERT_LT(step, 5000);
          for (; next < workload.size() && workload[next].step <= step; ++next) {
            const Arrival& a = workload[next];
            if (int(a.prompt.size()) >= max_len) {
              EXPECT_THROW(h.engine.add_request(a.id, a.prompt, a.params), Error);
            } else {
              h.add(a.id, a.prompt, a.params);
            }
          }
          const int64_t preemptions_before = h.engine.stats().num_preemptions;
          for (RequestOutput& out : h.engine.step()) {
            if (out.finished) h.finished[out.request_id] = std::move(out);
          }
          if (h.engine.stats().num_preemptions > preemptions_before) {
            for (const StepEntry& e : h.executor.steps.back().entries) {
              EXPECT_FALSE(e.admitted()) << "admitted " << e.request_id << " in a preempting step";
            }
          }
        }
        h.run_and_check();
        for (const StepRecord& r : h.executor.steps) {
          ASSERT_LE(r.num_tokens, c.max_num_batched_tokens);
          ASSERT_LE(int(r.entries.size()), c.max_num_seqs);
        }
        total_preemptions += h.engine.stats().num_preemptions;
        total_hits += h.engine.stats().prefix_cache_hits;
        for (const StepRecord& r : h.executor.steps) {
          for (const StepEntry& e : r.entries) total_pending += e.pending_input ? 1 : 0;
        }
      }
    }
  }
  // The sweep did exercise what it claims to.
  EXPECT_GT(total_preemptions, 20);
  EXPECT_GT(total_hits, 100);
  EXPECT_GT(total_pending, 1000);  // steps launched before the one before was settled
}

}  // namespace
}  // namespace kestrel::testing
