// Scheduling policy, observed through the steps the fake model is asked to run.
#include "engine/scheduler.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "engine_harness.h"

namespace kestrel::testing {
namespace {

TEST(Scheduler, LongPromptIsChunkedToTheBudget) {
  EngineLimits l = small_limits();
  l.max_num_batched_tokens = 32;
  l.block_size = 16;
  l.num_kv_blocks = 64;
  Harness h(l);
  h.add("a", make_prompt(70, 1, l.vocab_size), seeded(11, 3));
  h.run_and_check();
  const auto e = h.entries_of("a");
  ASSERT_EQ(e.size(), 5u);  // 3 prompt chunks, then 2 decodes
  // Each chunk attends over computed + chunk keys: 32, 64, 70.
  EXPECT_EQ(e[0].second.computed_before + e[0].second.num_new, 32);
  EXPECT_EQ(e[1].second.computed_before + e[1].second.num_new, 64);
  EXPECT_EQ(e[2].second.computed_before + e[2].second.num_new, 70);
  EXPECT_FALSE(e[0].second.sample);
  EXPECT_FALSE(e[1].second.sample);
  EXPECT_TRUE(e[2].second.sample);
  EXPECT_EQ(e[3].second.computed_before, 70);
  EXPECT_EQ(e[3].second.num_new, 1);
}

TEST(Scheduler, DecodesFirstThenPartialPrefillsThenNewRequests) {
  EngineLimits l = small_limits();
  l.max_num_batched_tokens = 16;
  Harness h(l);
  h.add("a", make_prompt(5, 1, l.vocab_size), seeded(1, 10));
  h.engine.step();  // a: whole prompt
  h.add("b", make_prompt(40, 2, l.vocab_size), seeded(2, 10));
  h.engine.step();  // a decodes, b gets the rest of the budget
  h.add("c", make_prompt(3, 3, l.vocab_size), seeded(3, 10));
  h.engine.step();  // budget used up by a and b: c waits
  h.engine.step();  // b finishes its prompt, c starts
  const auto& steps = h.executor.steps;
  ASSERT_EQ(steps.size(), 4u);
  auto ids = [](const StepRecord& r) {
    std::vector<std::pair<std::string, int>> v;
    for (const StepEntry& e : r.entries) v.emplace_back(e.request_id, e.num_new);
    return v;
  };
  using P = std::vector<std::pair<std::string, int>>;
  EXPECT_EQ(ids(steps[1]), (P{{"a", 1}, {"b", 15}}));
  EXPECT_EQ(ids(steps[2]), (P{{"a", 1}, {"b", 15}}));
  EXPECT_EQ(ids(steps[3]), (P{{"a", 1}, {"b", 10}, {"c", 3}}));
  for (const StepRecord& r : steps) EXPECT_LE(r.num_tokens, 16);
  h.run_and_check();
}

TEST(Scheduler, BudgetAndSequenceCapHoldEveryStep) {
  EngineLimits l = small_limits();
  l.max_num_batched_tokens = 7;
  l.max_num_seqs = 3;
  Harness h(l);
  for (int i = 0; i < 10; ++i) {
    h.add(fmt::format("r{}", i), make_prompt(1 + (i * 7) % 19, 100 + i, l.vocab_size),
          seeded(50 + i, 1 + i % 6));
  }
  h.run_and_check();
  for (const StepRecord& r : h.executor.steps) {
    EXPECT_LE(r.num_tokens, 7);
    EXPECT_LE(r.entries.size(), 3u);
    EXPECT_GE(r.num_tokens, 1);
  }
}

TEST(Scheduler, WithoutChunkingAPromptWaitsForRoomAndBlocksThoseBehindIt) {
  EngineLimits l = small_limits();
  l.enable_chunked_prefill = false;
  l.max_num_batched_tokens = 10;
  Harness h(l);
  h.add("a", make_prompt(8, 1, l.vocab_size), seeded(1, 4));
  h.add("b", make_prompt(5, 2, l.vocab_size), seeded(2, 4));
  h.add("c", make_prompt(1, 3, l.vocab_size), seeded(3, 4));  // would fit, but FCFS
  EXPECT_THROW(h.engine.add_request("too_long", make_prompt(11, 4, l.vocab_size), seeded(4, 1)),
               Error);
  h.engine.step();
  ASSERT_EQ(h.executor.steps[0].entries.size(), 1u);
  EXPECT_EQ(h.executor.steps[0].entries[0].request_id, "a");
  h.engine.step();
  const auto& s1 = h.executor.steps[1].entries;
  ASSERT_EQ(s1.size(), 3u);  // a decodes (1), b (5) and c (1) fit in 10
  EXPECT_EQ(s1[1].request_id, "b");
  EXPECT_EQ(s1[1].num_new, 5);
  EXPECT_EQ(s1[2].request_id, "c");
  h.run_and_check();
}

TEST(Scheduler, PromptWhollyInCacheStillComputesItsLastToken) {
  EngineLimits l = small_limits();
  l.block_size = 16;
  l.num_kv_blocks = 64;
  Harness h(l);
  const std::vector<int> prompt = make_prompt(32, 9, l.vocab_size);
  h.add("first", prompt, seeded(1, 4));
  h.run_and_check();
  h.add("same", prompt, seeded(2, 4));  // both blocks cached, only one may be used
  std::vector<int> longer = prompt;
  longer.push_back(17);
  h.add("longer", longer, seeded(3, 4));  // 2 full cached blocks + 1 token
  const auto done = h.run_and_check();
  const StepEntry same = h.entries_of("same")[0].second;
  EXPECT_EQ(same.computed_before, 16);
  EXPECT_EQ(same.num_new, 16);
  EXPECT_TRUE(same.sample);
  const StepEntry lg = h.entries_of("longer")[0].second;
  EXPECT_EQ(lg.computed_before, 32);
  EXPECT_EQ(lg.num_new, 1);
  EXPECT_TRUE(lg.sample);
  EXPECT_EQ(done.at("same").num_cached_tokens, 16);
  EXPECT_EQ(done.at("longer").num_cached_tokens, 32);
}

TEST(Scheduler, NewestPreemptsItselfWhenItIsTheOneWithoutABlock) {
  for (bool caching : {false, true}) {
    EngineLimits l = small_limits();
    l.block_size = 2;
    l.num_kv_blocks = 4;  // 8 token slots
    l.enable_prefix_caching = caching;
    l.max_num_seqs = 2;
    Harness h(l);
    h.add("a", {5, 6, 7}, seeded(1, 4));       // 2 blocks; position 3 still fits
    h.add("b", {8, 9, 10, 11}, seeded(2, 2));  // 2 blocks; position 4 needs a third
    h.add("c", {12}, seeded(3, 2));            // waits: max_num_seqs
    h.engine.step();
    EXPECT_EQ(h.engine.block_manager().num_free_blocks(), 0);
    h.engine.step();  // b must give up its blocks; a goes on
    ASSERT_EQ(h.executor.steps[1].entries.size(), 1u);
    EXPECT_EQ(h.executor.steps[1].entries[0].request_id, "a");
    EXPECT_EQ(h.engine.stats().num_preemptions, 1);
    EXPECT_EQ(h.engine.stats().num_waiting, 2);
    h.run_and_check();
    // b came back with prompt + its first token (5 tokens). Without caching it recomputes
    // them all; with caching its first block (8, 9) is still cached: a's new block was
    // taken from b's tail, which the free queue evicts first.
    const auto b = h.entries_of("b");
    EXPECT_EQ(b[1].second.computed_before, caching ? 2 : 0);
    EXPECT_EQ(b[1].second.num_new, caching ? 3 : 5);
    EXPECT_EQ(b[1].second.num_preemptions, 1);
    // The preempted b is older than c, so c may not start before b is readmitted.
    EXPECT_LE(b[1].first, h.entries_of("c")[0].first);
  }
}

TEST(Scheduler, OldestRunningSequenceKeepsMakingProgress) {
  // Five requests in a cache that holds about two of them: whoever is oldest must compute
  // something in every step until it finishes, whatever the newer ones need.
  EngineLimits l = small_limits();
  l.block_size = 2;
  l.num_kv_blocks = 12;
  l.max_num_batched_tokens = 6;
  Harness h(l);
  for (int i = 0; i < 5; ++i) {
    h.add(fmt::format("r{}", i), make_prompt(7, 10 + i, l.vocab_size), seeded(i, 8));
  }
  h.run_and_check();
  EXPECT_GE(h.engine.stats().num_preemptions, 1);
  const auto r0 = h.entries_of("r0");
  for (size_t i = 1; i < r0.size(); ++i) EXPECT_EQ(r0[i].first, r0[i - 1].first + 1);
  EXPECT_EQ(r0.back().second.num_preemptions, 0);
}

TEST(Scheduler, AdmissionIsFirstComeFirstServedAndNothingStarves) {
  EngineLimits l = small_limits();
  l.max_num_seqs = 3;
  l.max_num_batched_tokens = 8;
  Harness h(l);
  h.add("old", make_prompt(60, 1, l.vocab_size), seeded(1, 5));
  int next = 0;
  for (int step = 0; step < 400 && h.engine.has_unfinished(); ++step) {
    if (step < 60) {  // a flood of short requests behind the long one
      const std::string id = fmt::format("n{}", next++);
      h.add(id, make_prompt(2, 100 + next, l.vocab_size), seeded(100 + next, 2));
    }
    h.engine.step();
  }
  EXPECT_FALSE(h.engine.has_unfinished());
  // First step of each request, in arrival order, never decreases.
  int last_first_step = -1;
  int last_old = h.entries_of("old").back().first;
  EXPECT_LT(last_old, 30);  // 60 tokens at <= 8 a step, plus 5 decodes
  for (int i = 0; i < next; ++i) {
    const auto e = h.entries_of(fmt::format("n{}", i));
    ASSERT_FALSE(e.empty());
    EXPECT_GE(e[0].first, last_first_step) << i;
    last_first_step = e[0].first;
  }
  EXPECT_TRUE(h.executor.errors.empty());
}

TEST(Scheduler, RejectsBadLimits) {
  BlockManager bm(4, 4, true);
  SchedulerConfig c;
  c.max_num_seqs = 0;
  EXPECT_THROW(Scheduler(c, bm), Error);
  c = SchedulerConfig{};
  c.max_num_batched_tokens = 0;
  EXPECT_THROW(Scheduler(c, bm), Error);
}

TEST(Scheduler, MaxSeqLenIsTheSmallestLimit) {
  BlockManager bm(10, 4, true);  // 40 token slots
  SchedulerConfig c;
  c.max_model_len = 100;
  c.max_num_batched_tokens = 16;
  EXPECT_EQ(Scheduler(c, bm).max_model_len(), 40);
  c.max_model_len = 30;
  EXPECT_EQ(Scheduler(c, bm).max_model_len(), 30);
  c.enable_chunked_prefill = false;
  EXPECT_EQ(Scheduler(c, bm).max_model_len(), 17);
  Scheduler s(c, bm);
  EXPECT_NO_THROW(s.check_prompt_len(16));
  EXPECT_THROW(s.check_prompt_len(17), Error);
  EXPECT_THROW(s.check_prompt_len(0), Error);
}

}  // namespace
}  // namespace kestrel::testing
