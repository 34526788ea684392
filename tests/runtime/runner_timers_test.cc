// The LLM's benchmark aids: the runner's phase timers add up over steps (LLM::stats), and
// timing a decode forward between steps writes no KV (a prefix-cached prompt still gives
// the same tokens).
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "cpu_config.h"
#include "kestrel/llm.h"

namespace kestrel {
namespace {

std::string tiny_fixture() {
  for (const auto& e : std::filesystem::directory_iterator(std::string(KESTREL_SOURCE_DIR) + "/tests/data/hf")) {
    if (std::filesystem::exists(e.path() / "config.json")) return e.path().string();
  }
  return "";
}

EngineConfig cpu_config() { return test::cpu_config(64); }

TEST(RunnerTimers, PhasesAccumulateAndForwardTimingWritesNoKv) {
  const std::string dir = tiny_fixture();
  ASSERT_FALSE(dir.empty());
  LLM llm(dir, cpu_config());
  SamplingParams p;
  p.temperature = 0.0f;
  p.ignore_eos = true;
  p.max_tokens = 6;
  const std::vector<int> prompt = {3, 17, 42, 5, 99, 23, 8, 11, 64, 2, 7, 30, 15, 4, 81, 9, 12, 6};
  const std::vector<int> first = llm.generate({prompt}, p, false)[0].outputs[0].token_ids;
  const LLMStats s = llm.stats();
  EXPECT_EQ(s.eager_steps, 6);  // one prompt step, five decode steps
  EXPECT_GT(s.prepare_seconds, 0.0);
  EXPECT_GT(s.launch_seconds, 0.0);
  EXPECT_GT(s.sample_seconds, 0.0);

  EXPECT_GT(llm.time_decode_forward(2, 20, 2), 0.0);
  EXPECT_THROW(llm.time_decode_forward(0, 20, 1), Error);
  EXPECT_THROW(llm.time_decode_forward(1, 1 << 30, 1), Error);
  // The prompt's first block comes from the prefix cache: had the timing written K/V
  // anywhere, the continuation would change.
  const RequestOutput again = llm.generate({prompt}, p, false)[0];
  EXPECT_GT(again.num_cached_tokens, 0);
  EXPECT_EQ(again.outputs[0].token_ids, first);
}

}  // namespace
}  // namespace kestrel
