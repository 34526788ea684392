// Prompt logprobs through the engine (SamplingParams::prompt_logprobs): the executor fills
// them as it computes the prompt (here the fake model, whose value at each position is a
// function of every token up to it), the scheduler gives the request no prefix-cache hits,
// and the engine reports them once the prompt is done.
#include <gtest/gtest.h>

#include "core/error.h"
#include "engine_harness.h"

namespace kestrel::testing {
namespace {

// What the fake model gives for each prompt token after the first, from the prompt alone.
std::vector<TokenLogprobs> expected_prompt_logprobs(const std::vector<int>& prompt) {
  std::vector<TokenLogprobs> want;
  uint64_t kv = kKvRoot;
  for (size_t p = 0; p + 1 < prompt.size(); ++p) {
    kv = kv_value(kv, prompt[p]);
    want.push_back(fake_prompt_logprob(kv, prompt[p + 1]));
  }
  return want;
}

void expect_equal(const std::vector<TokenLogprobs>& got, const std::vector<TokenLogprobs>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].token_id, want[i].token_id) << "entry " << i;
    EXPECT_EQ(got[i].logprob, want[i].logprob) << "entry " << i;
    EXPECT_EQ(got[i].rank, want[i].rank) << "entry " << i;
  }
}

SamplingParams with_prompt_logprobs(uint64_t seed, int max_tokens) {
  SamplingParams p = seeded(seed, max_tokens);
  p.prompt_logprobs = 3;
  return p;
}

TEST(PromptLogprobs, ComeWithTheFirstOutputOverChunkedSteps) {
  // 64 tokens a step: the 150-token prompt takes three steps.
  Harness h(small_limits());
  const std::vector<int> prompt = make_prompt(150, 4, 1000);
  h.add("a", prompt, with_prompt_logprobs(3, 4));
  h.add("plain", make_prompt(30, 5, 1000), seeded(4, 4));
  int outputs_with = 0, outputs = 0;
  while (h.engine.has_unfinished()) {
    for (const RequestOutput& out : h.engine.step()) {
      if (out.request_id != "a") {
        EXPECT_TRUE(out.prompt_logprobs.empty());
        continue;
      }
      ++outputs;
      outputs_with += !out.prompt_logprobs.empty();
      expect_equal(out.prompt_logprobs, expected_prompt_logprobs(prompt));  // cumulative: every one
    }
  }
  EXPECT_EQ(outputs, 4);
  EXPECT_EQ(outputs_with, 4);
  EXPECT_GE(h.entries_of("a").size(), 3u + 3u) << "three prompt chunks, then decodes";
  EXPECT_TRUE(h.executor.errors.empty()) << h.executor.errors.front();
}

TEST(PromptLogprobs, SkipThePrefixCacheAndStillCacheThePrompt) {
  Harness h(small_limits());
  const std::vector<int> prompt = make_prompt(41, 6, 1000);
  h.add("first", prompt, seeded(1, 3));
  h.run_and_check();
  h.add("scored", prompt, with_prompt_logprobs(2, 3));
  const auto done = h.run_and_check();
  EXPECT_EQ(done.at("scored").num_cached_tokens, 0) << "a cached position has no logits";
  expect_equal(done.at("scored").prompt_logprobs, expected_prompt_logprobs(prompt));
  EXPECT_TRUE(done.at("first").prompt_logprobs.empty());
  // The scored request's blocks are in the cache like anyone's: a third request hits them.
  h.add("after", prompt, seeded(3, 3));
  const auto after = h.run_and_check();
  EXPECT_EQ(after.at("after").num_cached_tokens, 40);
}

TEST(PromptLogprobs, DeltasCarryThemOnceAndSamplesShareThem) {
  Harness h(small_limits());
  const std::vector<int> prompt = make_prompt(23, 7, 1000);
  SamplingParams p = with_prompt_logprobs(5, 5);
  p.n = 3;
  p.output_kind = OutputKind::kDelta;
  h.add("d", prompt, p);
  int with = 0;
  while (h.engine.has_unfinished()) {
    for (const RequestOutput& out : h.engine.step()) {
      if (out.prompt_logprobs.empty()) continue;
      ++with;
      expect_equal(out.prompt_logprobs, expected_prompt_logprobs(prompt));
    }
  }
  EXPECT_EQ(with, 1);
  EXPECT_TRUE(h.executor.errors.empty()) << h.executor.errors.front();
}

TEST(PromptLogprobs, AOneTokenPromptHasNone) {
  Harness h(small_limits());
  h.add("one", {17}, with_prompt_logprobs(8, 2));
  const auto done = h.run_and_check();
  EXPECT_TRUE(done.at("one").prompt_logprobs.empty());
}

TEST(PromptLogprobs, SurvivePreemptionAndOverlap) {
  // Few KV blocks: requests are preempted and recompute their prompts; the entries are the
  // prompt's whatever happened, and each position is filled once.
  for (bool overlap : {false, true}) {
    SCOPED_TRACE(overlap ? "overlapped" : "synchronous");
    EngineLimits l = small_limits();
    l.num_kv_blocks = 20;
    l.async_scheduling = overlap;
    Harness h(l);
    std::vector<std::vector<int>> prompts;
    for (int r = 0; r < 4; ++r) {
      prompts.push_back(make_prompt(30 + 3 * r, 10 + r, 1000));
      h.add("r" + std::to_string(r), prompts.back(), with_prompt_logprobs(20 + r, 12));
    }
    const auto done = h.run_and_check();
    EXPECT_GT(h.engine.stats().num_preemptions, 0);
    for (int r = 0; r < 4; ++r) {
      expect_equal(done.at("r" + std::to_string(r)).prompt_logprobs,
                   expected_prompt_logprobs(prompts[r]));
    }
  }
}

TEST(PromptLogprobs, OutOfRangeIsRejected) {
  Harness h(small_limits());
  SamplingParams p = seeded(1, 2);
  p.prompt_logprobs = SamplingParams::kMaxLogprobs + 1;
  EXPECT_THROW(h.engine.add_request("bad", make_prompt(5, 1, 1000), p), Error);
  p.prompt_logprobs = -1;
  EXPECT_THROW(h.engine.add_request("bad", make_prompt(5, 1, 1000), p), Error);
}

}  // namespace
}  // namespace kestrel::testing
