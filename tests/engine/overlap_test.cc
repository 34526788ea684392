// The engine's host/device overlap (EngineLimits::async_scheduling): a step is launched
// before the one before it is settled, and everything a user sees stays as without it.
#include <gtest/gtest.h>

#include <stdexcept>

#include "core/error.h"
#include "engine_harness.h"

namespace kestrel::testing {
namespace {

EngineLimits overlapped() {
  EngineLimits l = small_limits();
  l.async_scheduling = true;
  return l;
}

TEST(Overlap, LaunchesEachDecodeBeforeTheStepBeforeIsSettled) {
  Harness h(overlapped());
  h.add("a", make_prompt(6, 1, h.limits.vocab_size), seeded(11, 5));
  EXPECT_TRUE(h.engine.step().empty());  // the prompt step is in flight, nothing settled
  ASSERT_EQ(h.executor.steps.size(), 1u);
  const std::vector<RequestOutput> second = h.engine.step();
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].outputs[0].token_ids.size(), 1u);  // the prompt step's token
  ASSERT_EQ(h.executor.steps.size(), 2u);
  EXPECT_TRUE(h.executor.steps[1].entries[0].pending_input);
  h.run_and_check();
  // One step per token: the last decode is known to end by length, so none is wasted.
  EXPECT_EQ(h.executor.steps.size(), 5u);
  EXPECT_EQ(h.engine.stats().total_generation_tokens, 5);
}

TEST(Overlap, AStopTokenCostsOneWastedRowAndNothingElse) {
  const std::vector<int> prompt = make_prompt(7, 2, 1000);
  SamplingParams p = seeded(12, 20);
  const Expected free_run =
      reference_generate(prompt, expected_sample_seed(12, 0), p, 1000, {0}, 256);
  ASSERT_GE(free_run.tokens.size(), 4u);
  p.stop_token_ids = {free_run.tokens[2]};  // ends at the third token

  Harness sync(small_limits());
  sync.add("a", prompt, p);
  sync.run_and_check();
  Harness h(overlapped());
  h.add("a", prompt, p);
  const auto out = h.run_and_check();
  EXPECT_EQ(out.at("a").outputs[0].token_ids, sync.finished.at("a").outputs[0].token_ids);
  EXPECT_EQ(out.at("a").outputs[0].finish_reason, "stop");
  EXPECT_EQ(sync.executor.steps.size(), 3u);
  EXPECT_EQ(h.executor.steps.size(), 4u);  // the row launched before the stop was seen
  EXPECT_EQ(h.engine.stats().total_generation_tokens, 4);
}

TEST(Overlap, AbortWhileAStepIsInFlightLeavesTheOthersExact) {
  Harness h(overlapped());
  for (int i = 0; i < 4; ++i) {
    h.add("r" + std::to_string(i), make_prompt(5 + i, 20 + i, 1000), seeded(30 + i, 12));
  }
  for (int i = 0; i < 4; ++i) {
    for (RequestOutput& out : h.engine.step()) EXPECT_FALSE(out.finished);
  }
  EXPECT_TRUE(h.engine.abort_request("r1"));
  EXPECT_FALSE(h.engine.abort_request("r1"));
  EXPECT_TRUE(h.engine.abort_sample("r2", 0));
  h.added.erase("r1");
  h.added.erase("r2");
  h.run_and_check();  // r0 and r3 exact, no other output, every block free
  EXPECT_FALSE(h.finished.contains("r1"));
  EXPECT_FALSE(h.finished.contains("r2"));
}

// A penalised request beside a plain one, run to the end (outputs checked); returns the
// number of step entries whose input was a pending token.
int run_penalised_pair(Harness& h) {
  SamplingParams with = seeded(41, 8);
  with.frequency_penalty = 0.3f;
  with.repetition_penalty = 1.2f;
  h.add("pen", make_prompt(6, 40, 1000), with);
  h.add("plain", make_prompt(6, 41, 1000), seeded(42, 8));
  h.run_and_check();
  int pending = 0;
  for (const StepRecord& r : h.executor.steps) {
    for (const StepEntry& e : r.entries) pending += e.pending_input ? 1 : 0;
  }
  return pending;
}

TEST(Overlap, PenaltiesSettleTheStepBeforeScheduling) {
  Harness h(overlapped());
  EXPECT_EQ(run_penalised_pair(h), 0);  // the penalised request in every step settles the one before
  EXPECT_EQ(h.engine.stats().num_overlapped_steps, 0);
}

// An executor that feeds the pending token to its sampler's output ids (the model runner
// without token feedback) lets penalised requests overlap too, with the same outputs.
TEST(Overlap, PenaltiesOverlapWhereTheExecutorSamplesPendingTokens) {
  Harness h(overlapped());
  h.executor.pending_samples = true;
  EXPECT_GT(run_penalised_pair(h), 0);
  EXPECT_EQ(h.engine.stats().num_overlapped_steps, static_cast<int64_t>(h.executor.steps.size()) - 1);
}

// Throws from launch (or collect) number `fail_at` (1-based) once.
class FailingExecutor : public PagedFakeExecutor {
 public:
  FailingExecutor(const EngineLimits& l, int fail_at, bool in_collect = false)
      : PagedFakeExecutor(l.num_kv_blocks, l.block_size, l.vocab_size),
        fail_at_(fail_at),
        in_collect_(in_collect) {}
  void launch(const ScheduledBatch& batch) override {
    if (!in_collect_ && ++launches_ == fail_at_) throw Error("device lost (test)");
    PagedFakeExecutor::launch(batch);
  }
  std::vector<SampledToken> collect() override {
    if (in_collect_ && ++collects_ == fail_at_) {
      PagedFakeExecutor::collect();  // the step is gone either way
      throw Error("device lost (test)");
    }
    return PagedFakeExecutor::collect();
  }

 private:
  const int fail_at_;
  const bool in_collect_;
  int launches_ = 0, collects_ = 0;
};

TEST(Overlap, AnAbortWhoseDrainFailsStillAbortsAndTheOthersGoOn) {
  const EngineLimits l = overlapped();
  FailingExecutor executor(l, 3, /*in_collect=*/true);
  LLMEngine engine(l, executor);
  const std::vector<int> prompt = make_prompt(6, 60, l.vocab_size);
  engine.add_request("a", prompt, seeded(61, 6));
  engine.add_request("b", make_prompt(9, 62, l.vocab_size), seeded(63, 6));
  for (int i = 0; i < 3; ++i) engine.step();  // collects 1 and 2; step 3 is in flight
  EXPECT_TRUE(engine.abort_request("b"));     // its drain fails on collect 3: undone
  std::map<std::string, RequestOutput> done = run_to_completion(engine);
  ASSERT_EQ(done.size(), 1u);
  const Expected e = reference_generate(prompt, expected_sample_seed(61, 0), seeded(61, 6),
                                        l.vocab_size, l.eos_token_ids, expected_max_model_len(l));
  EXPECT_EQ(done.at("a").outputs[0].token_ids, e.tokens);
  EXPECT_TRUE(executor.errors.empty()) << executor.errors.front();
  EXPECT_EQ(engine.block_manager().num_free_blocks(), l.num_kv_blocks);
}

TEST(Overlap, AnExecutorErrorUndoesTheStepsInFlight) {
  for (int fail_at : {2, 3, 5}) {
    const EngineLimits l = overlapped();
    FailingExecutor executor(l, fail_at);
    LLMEngine engine(l, executor);
    const std::vector<int> prompt = make_prompt(6, 50, l.vocab_size);
    engine.add_request("a", prompt, seeded(51, 6));
    engine.add_request("b", make_prompt(9, 52, l.vocab_size), seeded(53, 6));
    std::map<std::string, RequestOutput> done;
    int errors = 0;
    for (int i = 0; i < 100 && engine.has_unfinished(); ++i) {
      try {
        for (RequestOutput& out : engine.step()) {
          if (out.finished) done[out.request_id] = std::move(out);
        }
      } catch (const Error& e) {
        ++errors;
        EXPECT_STREQ(e.what(), "device lost (test)");
      }
    }
    EXPECT_EQ(errors, 1);
    ASSERT_EQ(done.size(), 2u) << fail_at;
    const SamplingParams p = seeded(51, 6);
    const Expected e = reference_generate(prompt, expected_sample_seed(51, 0), p, l.vocab_size,
                                          l.eos_token_ids, expected_max_model_len(l));
    EXPECT_EQ(done.at("a").outputs[0].token_ids, e.tokens) << fail_at;
    EXPECT_TRUE(executor.errors.empty()) << executor.errors.front();
    EXPECT_EQ(engine.block_manager().num_free_blocks(), l.num_kv_blocks);
  }
}

}  // namespace
}  // namespace kestrel::testing
