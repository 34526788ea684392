// Tensor parallelism of CausalLM on the CPU backend: N ranks as threads of this process
// (thread_communicator.h), each with its own CpuBackend, model shard and KV cache, against
// Hugging Face's logits and greedy tokens (tests/data/hf) and against the unsharded model.
// Also the ShardPlan table (tensor_parallel_weights_test.cc checks the weight shards).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "io/model_config.h"
#include "hf_fixtures.h"
#include "model/causal_lm.h"
#include "model/shard_plan.h"
#include "thread_communicator.h"
#include "tp_runner.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

// Against HF's fp32 logits: hf_fixture_test's tolerance.
constexpr double kHfTolerance = 1e-4;

using test::fixture_models;
using test::fixture_root;

using test::Outputs;
using test::row_error;
using test::run_prompts;
using test::run_tensor_parallel;

class TensorParallelFixture : public testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(TensorParallelFixture, MatchesTransformersAndTheUnshardedModel) {
  const auto& [name, world_size] = GetParam();
  const std::string dir = (fixture_root() / name).string();
  const nlohmann::json expected = read_json_file(dir + "/expected.json");
  std::vector<std::vector<int>> prompts;
  for (const auto& p : expected["prompts"]) prompts.push_back(p.get<std::vector<int>>());
  const size_t greedy_len = expected["greedy"][0].size();

  CpuBackend backend(1);
  auto model = CausalLM::load(dir, backend);
  const Outputs single = run_prompts(*model, backend, prompts, greedy_len);
  const std::vector<Outputs> tp = run_tensor_parallel(dir, world_size, prompts, greedy_len);

  const std::string where = name + " on " + std::to_string(world_size) + " ranks";
  const double worst = test::expect_ranks_match_single(tp, single, where);
  RecordProperty("max_error_vs_unsharded", std::to_string(worst));
  std::printf("%s: largest error against the unsharded model %.3g\n", where.c_str(), worst);
  for (size_t p = 0; p < prompts.size(); ++p) {
    for (size_t t = 0; t < prompts[p].size(); ++t) {
      const auto want = expected["logits"][p][t].get<std::vector<double>>();
      EXPECT_LE(row_error(tp[0].logits[p][t], want), kHfTolerance)
          << where << " prompt " << p << " position " << t;
    }
    EXPECT_EQ(tp[0].greedy[p], expected["greedy"][p].get<std::vector<int>>())
        << where << " prompt " << p;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, TensorParallelFixture,
                         testing::Combine(testing::ValuesIn(fixture_models()),
                                          testing::Values(1, 2, 4)),
                         [](const testing::TestParamInfo<std::tuple<std::string, int>>& info) {
                           return std::get<0>(info.param) + "_tp" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(TensorParallel, WorldSizeThatSplitsNoHeadsIsAClearError) {
  auto group = std::make_shared<test::ThreadGroup>(3);
  test::ThreadCommunicator comm(group, 0);
  CpuBackend backend(1);
  try {
    CausalLM::load((fixture_root() / "qwen3_tiny").string(), backend, &comm);
    FAIL() << "loaded a 4-head model on 3 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor_parallel_size 3 does not divide the 4 query "
                                         "heads"),
              std::string::npos)
        << e.what();
  }
}

// ---- ShardPlan ----

ModelConfig shape_config(int q_heads, int kv_heads, int inter, int vocab) {
  ModelConfig c;
  c.architecture = "Qwen3ForCausalLM";
  c.num_attention_heads = q_heads;
  c.num_key_value_heads = kv_heads;
  c.intermediate_size = inter;
  c.vocab_size = vocab;
  c.hidden_size = 64;
  c.head_dim = 16;
  c.num_hidden_layers = 1;
  return c;
}

std::string plan_error(const ModelConfig& c, int rank, int world_size) {
  try {
    ShardPlan::make(c, rank, world_size);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ShardPlan, OneRankIsTheWholeModel) {
  const ModelConfig c = shape_config(32, 8, 1000, 151936);
  const ShardPlan p = ShardPlan::make(c, 0, 1);
  EXPECT_EQ(p.num_q_heads, 32);
  EXPECT_EQ(p.q_head_start, 0);
  EXPECT_EQ(p.num_kv_heads, 8);
  EXPECT_EQ(p.kv_head_start, 0);
  EXPECT_EQ(p.intermediate, 1000);
  EXPECT_EQ(p.intermediate_start, 0);
  EXPECT_EQ(p.vocab_per_rank, 151936);
  EXPECT_EQ(p.vocab_start, 0);
}

TEST(ShardPlan, SplitsHeadsMlpAndVocabulary) {
  const ModelConfig c = shape_config(32, 8, 12288, 151936);
  for (int r = 0; r < 8; ++r) {
    const ShardPlan p = ShardPlan::make(c, r, 8);
    EXPECT_EQ(p.rank, r);
    EXPECT_EQ(p.world_size, 8);
    EXPECT_EQ(p.num_q_heads, 4);
    EXPECT_EQ(p.q_head_start, 4 * r);
    EXPECT_EQ(p.num_kv_heads, 1);
    EXPECT_EQ(p.kv_head_start, r);
    EXPECT_EQ(p.intermediate, 1536);
    EXPECT_EQ(p.intermediate_start, 1536 * r);
    EXPECT_EQ(p.vocab_per_rank, 19200);  // ceil(151936 / 8) = 18992, in chunks of 256
    EXPECT_EQ(p.vocab_start, 19200 * r);
  }
  const ShardPlan p = ShardPlan::make(c, 1, 2);
  EXPECT_EQ(p.num_kv_heads, 4);
  EXPECT_EQ(p.kv_head_start, 4);
}

TEST(ShardPlan, ReplicatesKvHeadsWhenRanksOutnumberThem) {
  // 32 query heads, 8 KV heads (groups of 4) on 16 ranks: 2 query heads a rank, each KV
  // head on the 2 ranks whose query heads read it.
  const ModelConfig c = shape_config(32, 8, 4096, 1024);
  for (int r = 0; r < 16; ++r) {
    const ShardPlan p = ShardPlan::make(c, r, 16);
    EXPECT_EQ(p.num_q_heads, 2);
    EXPECT_EQ(p.num_kv_heads, 1);
    EXPECT_EQ(p.kv_head_start, r / 2);
    EXPECT_EQ(p.q_head_start / (32 / 8), p.kv_head_start) << "rank " << r;
  }
  // One KV head (llama_tiny): every rank holds it.
  const ModelConfig one = shape_config(4, 1, 128, 512);
  for (int r = 0; r < 4; ++r) {
    const ShardPlan p = ShardPlan::make(one, r, 4);
    EXPECT_EQ(p.num_kv_heads, 1);
    EXPECT_EQ(p.kv_head_start, 0);
  }
}

TEST(ShardPlan, PadsTheLastRanksVocabulary) {
  // Too small for whole chunks of 256 on every rank: ceil(V / N).
  const ModelConfig c = shape_config(4, 2, 128, 10);
  for (int r = 0; r < 4; ++r) {
    const ShardPlan p = ShardPlan::make(c, r, 4);
    EXPECT_EQ(p.vocab_per_rank, 3);
    EXPECT_EQ(p.vocab_start, 3 * r);
  }
  // 1,000 ids on 4 ranks: 250 rounds to 256 and the last rank keeps 232; on 2: 500 -> 512.
  EXPECT_EQ(ShardPlan::make(shape_config(4, 2, 128, 1000), 3, 4).vocab_start, 768);
  EXPECT_EQ(ShardPlan::make(shape_config(4, 2, 128, 1000), 1, 2).vocab_per_rank, 512);
  // 700 on 4: 175 -> 256 would leave the last rank nothing (768 > 700): 175.
  EXPECT_EQ(ShardPlan::make(shape_config(4, 2, 128, 700), 0, 4).vocab_per_rank, 175);
  // Qwen3 on 2 ranks: 75,968 -> 76,032 (297 chunks).
  EXPECT_EQ(ShardPlan::make(shape_config(4, 2, 128, 151936), 0, 2).vocab_per_rank, 76032);
}

TEST(ShardPlan, RejectsSplitsThatDoNotDivide) {
  EXPECT_NE(plan_error(shape_config(4, 2, 128, 512), 0, 3)
                .find("tensor_parallel_size 3 does not divide the 4 query heads"),
            std::string::npos);
  EXPECT_NE(plan_error(shape_config(4, 2, 130, 512), 0, 4).find("intermediate_size"),
            std::string::npos);
  // 12 query heads, 3 KV heads: 2 ranks divide neither way, 4 ranks are no multiple of 3.
  EXPECT_NE(plan_error(shape_config(12, 3, 120, 512), 0, 2).find("3 KV heads"), std::string::npos);
  EXPECT_NE(plan_error(shape_config(12, 3, 120, 512), 0, 4).find("3 KV heads"), std::string::npos);
  const ShardPlan six = ShardPlan::make(shape_config(12, 3, 120, 512), 5, 6);
  EXPECT_EQ(six.kv_head_start, 2);
  EXPECT_NE(plan_error(shape_config(4, 2, 128, 512), 4, 4).find("rank 4"), std::string::npos);
  EXPECT_NE(plan_error(shape_config(4, 2, 128, 512), -1, 4).find("rank -1"), std::string::npos);
  EXPECT_NE(plan_error(shape_config(4, 2, 128, 512), 0, 0).find("at least 1"), std::string::npos);
  // 5 tokens over 4 ranks: 2 a rank would leave the last rank none.
  EXPECT_NE(plan_error(shape_config(4, 2, 128, 5), 0, 4).find("vocabulary"), std::string::npos);
}

}  // namespace
}  // namespace kestrel
