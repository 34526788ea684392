// Token constraints (structured outputs) in the engine: every sample gets its own
// constraint, told each of its tokens once and in order (also with overlap, n > 1 and
// preemption), and a step with constrained rows is settled before the next is scheduled,
// so that no constrained row is launched with a pending token.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/error.h"
#include "engine_harness.h"
#include "kestrel/token_constraint.h"

namespace kestrel::testing {
namespace {

// Allows everything; records what it is told.
class RecordingConstraint : public TokenConstraint {
 public:
  explicit RecordingConstraint(std::shared_ptr<std::vector<int>> log) : log_(std::move(log)) {}
  std::span<const uint32_t> allowed_tokens() override { return all_; }
  bool can_end() const override { return true; }
  void accept(int token_id) override { log_->push_back(token_id); }

 private:
  std::shared_ptr<std::vector<int>> log_;
  std::vector<uint32_t> all_ = std::vector<uint32_t>(32, ~0u);
};

class RecordingFactory : public TokenConstraintFactory {
 public:
  std::unique_ptr<TokenConstraint> start() const override {
    logs.push_back(std::make_shared<std::vector<int>>());
    return std::make_unique<RecordingConstraint>(logs.back());
  }
  mutable std::vector<std::shared_ptr<std::vector<int>>> logs;  // one per sample, in start order
};

EngineLimits overlapped() {
  EngineLimits l = small_limits();
  l.async_scheduling = true;
  return l;
}

void expect_each_token_told_once(const Harness& h, const std::string& id, const RecordingFactory& f) {
  const RequestOutput& out = h.finished.at(id);
  ASSERT_EQ(f.logs.size(), out.outputs.size());
  for (const CompletionOutput& c : out.outputs) EXPECT_EQ(*f.logs[c.index], c.token_ids) << id << " " << c.index;
}

TEST(Constraint, OverlapSettlesConstrainedStepsFirst) {
  const EngineLimits l = overlapped();
  Harness h(l);
  auto factory = std::make_shared<RecordingFactory>();
  SamplingParams constrained = seeded(5, 9);
  constrained.constraint = factory;
  h.add("json", make_prompt(7, 1, l.vocab_size), constrained);
  h.add("plain", make_prompt(5, 2, l.vocab_size), seeded(6, 12));
  h.run_and_check();
  expect_each_token_told_once(h, "json", *factory);
  for (const auto& [step, e] : h.entries_of("json")) EXPECT_FALSE(e.pending_input) << "step " << step;
  // Once the constrained request is done, the plain one overlaps again.
  bool plain_pending = false;
  for (const auto& [step, e] : h.entries_of("plain")) plain_pending = plain_pending || e.pending_input;
  EXPECT_TRUE(plain_pending);
}

// With an executor that defers sampling (ModelExecutor::launch_sampling), a constrained
// step no longer waits for the one before: its forward overlaps, its sampling follows the
// settle. Tokens as the reference generator's, each told once and in order.
TEST(Constraint, DeferredSamplingKeepsConstrainedStepsOverlapped) {
  const EngineLimits l = overlapped();
  Harness h(l);
  h.executor.deferred_sampling = true;
  std::vector<std::shared_ptr<RecordingFactory>> factories;
  for (int i = 0; i < 3; ++i) {
    factories.push_back(std::make_shared<RecordingFactory>());
    SamplingParams p = seeded(30 + i, 10 + 3 * i);
    p.constraint = factories.back();
    if (i == 1) p.n = 2;
    h.add("json" + std::to_string(i), make_prompt(6 + i, 20 + i, l.vocab_size), p);
  }
  h.add("plain", make_prompt(5, 2, l.vocab_size), seeded(6, 12));
  h.run_and_check();
  for (int i = 0; i < 3; ++i) expect_each_token_told_once(h, "json" + std::to_string(i), *factories[i]);
  bool json_pending = false;
  for (const auto& [step, e] : h.entries_of("json0")) json_pending = json_pending || e.pending_input;
  EXPECT_TRUE(json_pending) << "no constrained step overlapped";
  EXPECT_GT(h.executor.deferred_samplings, 5);
  EXPECT_GE(h.engine.stats().num_overlapped_steps, h.engine.stats().num_steps / 2)
      << h.engine.stats().num_steps << " steps";
}

TEST(Constraint, EverySampleHasItsOwnConstraint) {
  const EngineLimits l = overlapped();
  Harness h(l);
  auto factory = std::make_shared<RecordingFactory>();
  SamplingParams p = seeded(8, 6);
  p.n = 3;
  p.constraint = factory;
  h.add("n3", make_prompt(9, 3, l.vocab_size), p);
  h.run_and_check();
  expect_each_token_told_once(h, "n3", *factory);
}

TEST(Constraint, PreemptionTellsNoTokenTwice) {
  EngineLimits l = overlapped();
  l.num_kv_blocks = 12;  // 48 slots for 4 requests of up to 24 tokens: preemptions
  Harness h(l);
  std::vector<std::shared_ptr<RecordingFactory>> factories;
  for (int i = 0; i < 4; ++i) {
    factories.push_back(std::make_shared<RecordingFactory>());
    SamplingParams p = seeded(20 + i, 16);
    p.constraint = factories.back();
    h.add("r" + std::to_string(i), make_prompt(8, 10 + i, l.vocab_size), p);
  }
  h.run_and_check();
  EXPECT_GT(h.engine.stats().num_preemptions, 0);
  for (int i = 0; i < 4; ++i) expect_each_token_told_once(h, "r" + std::to_string(i), *factories[i]);
}

TEST(Constraint, MinTokensWithAConstraintIsAnError) {
  Harness h(small_limits());
  SamplingParams p = seeded(1, 8);
  p.min_tokens = 2;
  p.constraint = std::make_shared<RecordingFactory>();
  try {
    h.engine.add_request("x", make_prompt(4, 1, 1000), p);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("min_tokens", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace kestrel::testing
