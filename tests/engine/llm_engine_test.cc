#include "engine/llm_engine.h"

#include <fmt/format.h>
#include <optional>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "engine_harness.h"

namespace kestrel::testing {
namespace {

using ::testing::HasSubstr;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(LLMEngine, StreamsCumulativeOutputsAndReportsEachFinishOnce) {
  Harness h(small_limits());
  h.add("a", make_prompt(9, 1, 1000), seeded(5, 6));
  h.add("b", make_prompt(3, 2, 1000), seeded(6, 3));
  std::map<std::string, std::vector<int>> seen;
  std::map<std::string, int> finishes;
  while (h.engine.has_unfinished()) {
    for (const RequestOutput& out : h.engine.step()) {
      ASSERT_EQ(out.outputs.size(), 1u);
      const std::vector<int>& tokens = out.outputs[0].token_ids;
      std::vector<int>& before = seen[out.request_id];
      ASSERT_EQ(tokens.size(), before.size() + 1) << "one new token per step";
      EXPECT_TRUE(std::equal(before.begin(), before.end(), tokens.begin()));
      before = tokens;
      EXPECT_EQ(out.finished, out.outputs[0].finished());
      finishes[out.request_id] += out.finished;
    }
  }
  EXPECT_EQ(seen["a"], h.expected("a", 0).tokens);
  EXPECT_EQ(seen["b"], h.expected("b", 0).tokens);
  EXPECT_EQ(finishes["a"], 1);
  EXPECT_EQ(finishes["b"], 1);
  EXPECT_TRUE(h.engine.step().empty());
  EXPECT_TRUE(h.executor.errors.empty());
}

TEST(LLMEngine, DeltaAndFinalOnlyOutputs) {
  // Three kinds side by side, n = 2 with logprobs: concatenated deltas and the single final
  // output must both equal the reference continuation, as the cumulative one does.
  Harness h(small_limits());
  SamplingParams delta = seeded(7, 6), final_only = seeded(8, 5), cumulative = seeded(9, 4);
  delta.output_kind = OutputKind::kDelta;
  final_only.output_kind = OutputKind::kFinalOnly;
  for (SamplingParams* p : {&delta, &final_only, &cumulative}) {
    p->n = 2;
    p->logprobs = 1;
  }
  h.add("delta", make_prompt(9, 1, 1000), delta);
  h.add("final", make_prompt(5, 2, 1000), final_only);
  h.add("cumulative", make_prompt(7, 3, 1000), cumulative);
  std::map<int, std::vector<int>> joined;  // delta: per sample
  std::map<int, size_t> logprobs;
  int delta_reports = 0, prompt_reports = 0, final_reports = 0;
  while (h.engine.has_unfinished()) {
    for (const RequestOutput& out : h.engine.step()) {
      if (out.request_id == "delta") {
        ++delta_reports;
        if (!out.prompt_token_ids.empty()) {
          ++prompt_reports;
          EXPECT_EQ(out.prompt_token_ids, make_prompt(9, 1, 1000));
        }
        size_t added = 0;
        for (const CompletionOutput& c : out.outputs) {
          EXPECT_LE(c.token_ids.size(), 1u) << "one new token per step";
          added += c.token_ids.size();
          joined[c.index].insert(joined[c.index].end(), c.token_ids.begin(), c.token_ids.end());
          EXPECT_EQ(c.logprobs.size(), c.token_ids.size());
          logprobs[c.index] += c.logprobs.size();
        }
        EXPECT_GT(added, 0u) << "a delta report carries new tokens";
      } else if (out.request_id == "final") {
        ++final_reports;
        EXPECT_TRUE(out.finished);
        EXPECT_EQ(out.prompt_token_ids, make_prompt(5, 2, 1000));
        for (const CompletionOutput& c : out.outputs) {
          EXPECT_EQ(c.token_ids, h.expected("final", c.index).tokens);
          EXPECT_EQ(c.logprobs.size(), c.token_ids.size());
        }
      } else {
        EXPECT_EQ(out.prompt_token_ids, make_prompt(7, 3, 1000));
      }
    }
  }
  EXPECT_EQ(final_reports, 1);
  EXPECT_EQ(prompt_reports, 1);
  EXPECT_GE(delta_reports, 6);  // six tokens per sample, at most one per step
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(joined[i], h.expected("delta", i).tokens) << "sample " << i;
    EXPECT_EQ(logprobs[i], 6u);
  }
  EXPECT_TRUE(h.executor.errors.empty());
}

TEST(LLMEngine, ImpossibleRequestsThrowAndOthersCarryOn) {
  EngineLimits l = small_limits();
  l.max_model_len = 40;
  Harness h(l);
  h.add("ok", make_prompt(10, 1, 1000), seeded(1, 8));
  h.engine.step();
  LLMEngine& e = h.engine;
  const auto p = seeded(2, 4);
  EXPECT_THAT(error_of([&] { e.add_request("ok", {1, 2}, p); }), HasSubstr("already in use"));
  EXPECT_THAT(error_of([&] { e.add_request("x", {}, p); }), HasSubstr("empty"));
  EXPECT_THAT(error_of([&] {
                e.add_request("x", {1, 1000}, p);
              }),
              HasSubstr("outside the vocabulary"));
  EXPECT_THAT(error_of([&] { e.add_request("x", {-1}, p); }), HasSubstr("position 0"));
  EXPECT_THAT(error_of([&] { e.add_request("x", make_prompt(40, 3, 1000), p); }),
              HasSubstr("at most 39"));
  SamplingParams bad = p;
  bad.temperature = -1.0f;
  EXPECT_THAT(error_of([&] { e.add_request("x", {1}, bad); }), HasSubstr("temperature"));
  // None of that touched the engine: "x" is free, "ok" runs on.
  h.add("x", make_prompt(39, 4, 1000), seeded(3, 4));  // the longest prompt allowed
  h.run_and_check();
  EXPECT_EQ(h.finished.at("x").outputs[0].token_ids.size(), 1u);  // hits max_model_len
  EXPECT_EQ(h.finished.at("x").outputs[0].finish_reason, "length");
}

TEST(LLMEngine, StopsAtMaxModelLen) {
  EngineLimits l = small_limits();
  l.max_model_len = 20;
  Harness h(l);
  SamplingParams p = seeded(9, 1);
  p.max_tokens.reset();
  h.add("a", make_prompt(15, 1, 1000), p);
  h.run_and_check();
  EXPECT_EQ(h.finished.at("a").outputs[0].token_ids.size(), 5u);
  EXPECT_EQ(h.finished.at("a").outputs[0].finish_reason, "length");
}

TEST(LLMEngine, AbortFreesBlocksWhereverTheRequestIs) {
  EngineLimits l = small_limits();
  l.max_num_seqs = 1;  // "waiting" stays queued behind "running"
  Harness h(l);
  h.add("running", make_prompt(30, 1, 1000), seeded(1, 50));
  h.add("waiting", make_prompt(5, 2, 1000), seeded(2, 5));
  h.engine.step();
  h.engine.step();
  const int free_before = h.engine.block_manager().num_free_blocks();
  EXPECT_EQ(free_before, l.num_kv_blocks - 8);  // 31 tokens in blocks of 4
  EXPECT_TRUE(h.engine.abort_request("running"));
  EXPECT_EQ(h.engine.block_manager().num_free_blocks(), l.num_kv_blocks);
  EXPECT_FALSE(h.engine.abort_request("running"));
  EXPECT_FALSE(h.engine.abort_request("never-added"));
  h.added.erase("running");
  h.add("later", make_prompt(6, 3, 1000), seeded(3, 4));
  EXPECT_TRUE(h.engine.abort_request("later"));  // still waiting
  h.added.erase("later");
  h.run_and_check();  // "waiting" ran to its end
  EXPECT_EQ(h.engine.stats().num_running, 0);
  EXPECT_EQ(h.engine.stats().num_waiting, 0);
}

TEST(LLMEngine, AbortOfASampledRequestFreesAllItsSamples) {
  for (int steps_before_abort : {1, 3}) {  // samples 1, 2 still held back / already running
    EngineLimits l = small_limits();
    l.max_num_batched_tokens = 8;
    Harness h(l);
    SamplingParams p = seeded(1, 20);
    p.n = 3;
    h.add("multi", make_prompt(12, 1, 1000), p);
    h.add("other", make_prompt(3, 2, 1000), seeded(2, 6));
    for (int i = 0; i < steps_before_abort; ++i) h.engine.step();
    EXPECT_EQ(h.engine.stats().num_waiting + h.engine.stats().num_running, 4);
    EXPECT_TRUE(h.engine.abort_request("multi"));
    h.added.erase("multi");
    EXPECT_EQ(h.engine.stats().num_waiting + h.engine.stats().num_running, 1);
    h.run_and_check();
  }
}

// The server stops one sample of n when its stop string matches: that sample ends with
// "abort" and frees its own blocks, the others go on to exactly their reference output.
TEST(LLMEngine, AbortSampleEndsOneSampleAndTheOthersGoOn) {
  EngineLimits l = small_limits();
  Harness h(l);
  SamplingParams p = seeded(4, 20);
  p.n = 2;
  h.add("multi", make_prompt(12, 1, 1000), p);
  // Run until both samples have generated something.
  std::vector<int> sample0_before_abort;
  for (int i = 0; i < 50 && sample0_before_abort.empty(); ++i) {
    for (const RequestOutput& out : h.engine.step()) {
      if (out.outputs.size() == 2 && !out.outputs[0].token_ids.empty() &&
          !out.outputs[1].token_ids.empty()) {
        sample0_before_abort = out.outputs[0].token_ids;
      }
    }
  }
  ASSERT_FALSE(sample0_before_abort.empty());
  const int used_before = l.num_kv_blocks - h.engine.block_manager().num_free_blocks();
  EXPECT_FALSE(h.engine.abort_sample("multi", 2));  // no such sample
  EXPECT_FALSE(h.engine.abort_sample("nobody", 0));
  EXPECT_TRUE(h.engine.abort_sample("multi", 0));
  EXPECT_FALSE(h.engine.abort_sample("multi", 0));  // already finished
  // Sample 0's own (non-shared) blocks went back to the pool; sample 1 keeps running.
  EXPECT_LT(l.num_kv_blocks - h.engine.block_manager().num_free_blocks(), used_before);
  EXPECT_EQ(h.engine.stats().num_running, 1);

  std::optional<RequestOutput> final_out;
  while (h.engine.has_unfinished()) {
    for (RequestOutput& out : h.engine.step()) {
      if (out.finished) final_out = std::move(out);
    }
  }
  ASSERT_TRUE(final_out.has_value());
  ASSERT_EQ(final_out->outputs.size(), 2u);
  EXPECT_EQ(final_out->outputs[0].finish_reason, "abort");
  EXPECT_EQ(final_out->outputs[0].token_ids, sample0_before_abort);
  const Expected e1 = h.expected("multi", 1);
  EXPECT_EQ(final_out->outputs[1].token_ids, e1.tokens);
  EXPECT_EQ(final_out->outputs[1].finish_reason, e1.finish_reason);
  EXPECT_EQ(h.engine.block_manager().num_free_blocks(), l.num_kv_blocks);
  EXPECT_TRUE(h.executor.errors.empty());
}

TEST(LLMEngine, EosStopTokensAndMinTokensFollowTheReference) {
  EngineLimits l = small_limits();
  l.vocab_size = 6;  // so EOS (0) comes up often
  Harness h(l);
  int num_stopped = 0;
  for (int i = 0; i < 40; ++i) {
    SamplingParams p = seeded(i, 12, /*ignore_eos=*/i % 4 == 0);
    p.min_tokens = i % 3;
    if (i % 5 == 1) p.stop_token_ids = {4};
    h.add(fmt::format("r{}", i), make_prompt(3 + i % 7, i, l.vocab_size), p);
  }
  h.run_and_check();
  for (const auto& [id, out] : h.finished) {
    const CompletionOutput& c = out.outputs[0];
    if (c.finish_reason != "stop") continue;
    ++num_stopped;
    const SamplingParams& p = h.added.at(id).params;
    EXPECT_GT(int(c.token_ids.size()), p.min_tokens);
    EXPECT_TRUE(c.token_ids.back() == 0 || c.token_ids.back() == 4);
  }
  EXPECT_GT(num_stopped, 10);
}

TEST(LLMEngine, SamplesOfOneRequestShareThePromptBlocks) {
  for (bool caching : {false, true}) {
    EngineLimits l = small_limits();
    l.block_size = 16;
    l.num_kv_blocks = 32;
    l.enable_prefix_caching = caching;
    Harness h(l);
    SamplingParams p = seeded(42, 8);
    p.n = 3;
    h.add("a", make_prompt(40, 1, 1000), p);
    int max_used = 0;
    while (h.engine.has_unfinished()) {
      for (RequestOutput& out : h.engine.step()) {
        if (out.finished) h.finished[out.request_id] = out;
      }
      max_used = std::max(max_used, l.num_kv_blocks - h.engine.block_manager().num_free_blocks());
    }
    // 3 blocks for sample 0; the others share its 2 full blocks and own 1 each.
    EXPECT_EQ(max_used, 5) << "caching " << caching;
    for (int i : {1, 2}) {
      const StepEntry first = h.entries_of("a", i)[0].second;
      EXPECT_EQ(first.computed_before, 32);
      EXPECT_EQ(first.num_new, 8);
    }
    h.run_and_check();
    const auto& outs = h.finished.at("a").outputs;
    ASSERT_EQ(outs.size(), 3u);
    EXPECT_NE(outs[0].token_ids, outs[1].token_ids);
    EXPECT_NE(outs[1].token_ids, outs[2].token_ids);
  }
}

TEST(LLMEngine, AppendsLogprobsFromTheExecutor) {
  Harness h(small_limits());
  SamplingParams p = seeded(3, 5);
  p.logprobs = 2;
  h.add("a", make_prompt(4, 1, 1000), p);
  h.run_and_check();
  const CompletionOutput& c = h.finished.at("a").outputs[0];
  ASSERT_EQ(c.logprobs.size(), c.token_ids.size());
  for (size_t i = 0; i < c.token_ids.size(); ++i) {
    EXPECT_EQ(c.logprobs[i].token_id, c.token_ids[i]);
    EXPECT_EQ(c.logprobs[i].logprob, -0.25f * float(c.token_ids[i] % 5));
  }
}

TEST(LLMEngine, UnseededRequestsFollowTheEngineSeed) {
  auto run = [](uint64_t engine_seed) {
    EngineLimits l = small_limits();
    l.seed = engine_seed;
    PagedFakeExecutor ex(l.num_kv_blocks, l.block_size, l.vocab_size);
    LLMEngine e(l, ex);
    SamplingParams p;
    p.max_tokens = 6;
    p.ignore_eos = true;
    e.add_request("a", make_prompt(5, 1, 1000), p);
    return run_to_completion(e).at("a").outputs[0].token_ids;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(LLMEngine, CountsTokensAndPrefixHits) {
  EngineLimits l = small_limits();
  Harness h(l);
  const std::vector<int> prompt = make_prompt(20, 1, 1000);
  h.add("a", prompt, seeded(1, 5));
  h.run_and_check();
  h.add("b", prompt, seeded(2, 5));
  h.run_and_check();
  const EngineStats s = h.engine.stats();
  EXPECT_EQ(s.total_prompt_tokens, 40);
  EXPECT_EQ(s.total_generation_tokens, 10);
  // a: 20 + 4 decodes; b: (20 - 16 cached) + 4 decodes. The last token is never computed.
  EXPECT_EQ(s.total_computed_tokens, 24 + 8);
  EXPECT_EQ(s.prefix_cache_queries, 40);
  EXPECT_EQ(s.prefix_cache_hits, 16);  // (20 - 1) / 4 = 4 blocks
  EXPECT_DOUBLE_EQ(s.prefix_cache_hit_rate, 0.4);
  EXPECT_EQ(h.finished.at("b").num_cached_tokens, 16);
}

class WrongCountExecutor : public ModelExecutor {
 public:
  std::vector<SampledToken> execute(const ScheduledBatch&) override { return {}; }
};

TEST(LLMEngine, RejectsAnExecutorThatReturnsTheWrongNumberOfTokens) {
  EngineLimits l = small_limits();
  WrongCountExecutor ex;
  LLMEngine e(l, ex);
  e.add_request("a", {1, 2, 3}, seeded(1, 2));
  EXPECT_THAT(error_of([&] { e.step(); }), HasSubstr("returned 0 tokens for 1"));
}

TEST(LLMEngine, RejectsBadLimits) {
  EngineLimits l = small_limits();
  PagedFakeExecutor ex(4, 4, 10);
  l.vocab_size = 0;
  EXPECT_THROW(LLMEngine(l, ex), Error);
  l = small_limits();
  l.num_kv_blocks = 0;
  EXPECT_THROW(LLMEngine(l, ex), Error);
}

}  // namespace
}  // namespace kestrel::testing
