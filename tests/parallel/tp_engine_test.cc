// Tensor parallelism end to end on the CPU backend, through the real multi-process path
// (LocalWorkers starts copies of this binary as ranks; gloo carries the steps and the
// collectives). The oracle is Hugging Face transformers' greedy continuations
// (tests/data/hf/*/expected.json); the one-rank engine is the second reference, for
// logprobs and for the engine invariants (batched == one at a time, chunked prefill,
// prefix cache on/off, forced preemption), which must hold under tensor parallelism too.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <sstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "kestrel/llm.h"
#include "../engine/mod_three_constraint.h"
#include "runtime/tp_worker.h"
#include "child_processes.h"
#include "worker_registry.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

// Ranks started by the LLMs below run the engine's worker loop.
KS_TP_WORKER(engine) { return run_tensor_parallel_worker(self); }

struct Fixture {
  std::string dir;
  std::vector<std::vector<int>> prompts;
  std::vector<std::vector<int>> greedy;
};

Fixture load_fixture(const std::string& name) {
  const fs::path dir = fs::path(KESTREL_SOURCE_DIR) / "tests/data/hf" / name;
  std::ifstream in(dir / "expected.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  return {dir.string(), j["prompts"].get<std::vector<std::vector<int>>>(),
          j["greedy"].get<std::vector<std::vector<int>>>()};
}

SamplingParams greedy_params(int max_tokens, int logprobs = 0) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.ignore_eos = true;
  p.max_tokens = max_tokens;
  if (logprobs > 0) p.logprobs = logprobs;
  return p;
}

EngineConfig cpu_config(int tp) {
  EngineConfig c;
  c.device = "cpu";
  c.num_kv_blocks = 256;
  c.num_threads = 1;
  c.tensor_parallel_size = tp;
  return c;
}

class TensorParallel : public ::testing::Test {
 protected:
  void SetUp() override { setenv(test::kWorkerEnv, "engine", 1); }
};

std::vector<std::vector<int>> tokens_of(const std::vector<RequestOutput>& outs) {
  std::vector<std::vector<int>> t;
  for (const RequestOutput& o : outs) t.push_back(o.outputs.at(0).token_ids);
  return t;
}

// Logprobs of the one-rank engine and of N ranks differ only by the order of fp32 sums
// (each rank sums its slice of every dot product; the all-reduce adds the slices): about
// 1e-6 relative on these models. 2e-4 absolute on a logprob leaves room and still catches
// a wrong shard (which moves logprobs by O(1)).
constexpr float kLogprobTolerance = 2e-4f;

void expect_same_logprobs(const std::vector<RequestOutput>& got,
                          const std::vector<RequestOutput>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const auto& a = got[i].outputs.at(0).logprobs;
    const auto& b = want[i].outputs.at(0).logprobs;
    ASSERT_EQ(a.size(), b.size()) << what << " prompt " << i;
    for (size_t t = 0; t < a.size(); ++t) {
      EXPECT_NEAR(a[t].logprob, b[t].logprob, kLogprobTolerance)
          << what << " prompt " << i << " token " << t;
      ASSERT_EQ(a[t].top.size(), b[t].top.size());
      for (size_t k = 0; k < a[t].top.size(); ++k) {
        EXPECT_NEAR(a[t].top[k].second, b[t].top[k].second, kLogprobTolerance)
            << what << " prompt " << i << " token " << t << " top " << k;
      }
    }
  }
}

// Every fixture architecture at 2 and 4 ranks: HF's greedy tokens, and the one-rank
// engine's logprobs. Qwen3 (4 query, 2 KV heads) splits its KV heads at 2 ranks and
// replicates them at 4; Llama (1 KV head) replicates at both; Qwen2 has q/k/v biases.
TEST_F(TensorParallel, GreedyTokensAndLogprobsMatchOneRank) {
  for (const char* name : {"qwen3_tiny", "qwen2_tiny", "llama_tiny"}) {
    const Fixture f = load_fixture(name);
    LLM one(f.dir, cpu_config(1));
    const auto want = one.generate(f.prompts, greedy_params(20, 5), false);
    for (int tp : {2, 4}) {
      const std::string what = std::string(name) + " at tensor_parallel_size " + std::to_string(tp);
      LLM llm(f.dir, cpu_config(tp));
      const auto got = llm.generate(f.prompts, greedy_params(20, 5), false);
      EXPECT_EQ(tokens_of(got), f.greedy) << what;
      expect_same_logprobs(got, want, what);
    }
  }
}

// Constrained requests at 2 ranks, their steps overlapped by deferred sampling (rank 0 runs
// each forward with the workers, then samples once the step before has settled), beside a
// free request and one with prompt logprobs: the one-rank engine's tokens and logprobs.
TEST_F(TensorParallel, ConstrainedRequestsOverlapAndMatchOneRank) {
  const Fixture f = load_fixture("qwen3_tiny");
  const auto factory = std::make_shared<testing::ModThreeFactory>(load_model_config(f.dir).vocab_size);
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < f.prompts.size(); ++i) {
    SamplingParams p = greedy_params(12 + static_cast<int>(i), 2);
    if (i % 3 != 1) p.constraint = factory;
    if (i == 1) p.prompt_logprobs = 1;
    params.push_back(p);
  }
  auto run = [&](int tp, LLMStats* stats) {
    LLM llm(f.dir, cpu_config(tp));
    auto out = llm.generate(f.prompts, params, false);
    *stats = llm.stats();
    return out;
  };
  LLMStats one_stats, two_stats;
  const auto want = run(1, &one_stats);
  const auto got = run(2, &two_stats);
  EXPECT_EQ(tokens_of(got), tokens_of(want));
  expect_same_logprobs(got, want, "constrained at tensor_parallel_size 2");
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(got[1].prompt_logprobs.size(), want[1].prompt_logprobs.size());
  for (int tp = 0; tp < 2; ++tp) {
    const LLMStats& s = tp == 0 ? one_stats : two_stats;
    EXPECT_GE(s.num_overlapped_steps, s.num_steps / 2) << s.num_steps << " steps, " << tp + 1 << " ranks";
  }
}

// Prompt logprobs at 2 ranks (the prompt rows travel with each step and every rank joins
// their LM-head gathers), in chunks of 7 tokens read back 4 rows at a time: the one-rank
// engine's values.
TEST_F(TensorParallel, PromptLogprobsMatchOneRank) {
  const Fixture f = load_fixture("qwen3_tiny");
  SamplingParams p = greedy_params(2);
  p.prompt_logprobs = 2;
  EngineConfig c = cpu_config(1);
  c.max_num_batched_tokens = 7;
  c.max_num_seqs = 4;
  LLM one(f.dir, c);
  const auto want = one.generate(f.prompts, p, false);
  c.tensor_parallel_size = 2;
  LLM llm(f.dir, c);
  const auto got = llm.generate(f.prompts, p, false);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const auto& a = got[i].prompt_logprobs;
    const auto& b = want[i].prompt_logprobs;
    ASSERT_EQ(a.size(), f.prompts[i].size() - 1) << "prompt " << i;
    ASSERT_EQ(b.size(), a.size()) << "prompt " << i;
    for (size_t t = 0; t < a.size(); ++t) {
      EXPECT_EQ(a[t].token_id, f.prompts[i][t + 1]);
      EXPECT_NEAR(a[t].logprob, b[t].logprob, kLogprobTolerance) << "prompt " << i << " position " << t;
      ASSERT_EQ(a[t].top.size(), 2u);
      for (size_t k = 0; k < 2; ++k) {
        EXPECT_NEAR(a[t].top[k].second, b[t].top[k].second, kLogprobTolerance)
            << "prompt " << i << " position " << t << " top " << k;
      }
    }
  }
}

// Decode steps of up to 8 tokens on the fused ops (KESTREL_FUSED_MAX_ROWS=8 turns them on in
// the CPU backends of this process and of the ranks it starts): each rank's o_proj and down
// partial sums reach the residual through the communicator's all_reduce_add. HF's greedy
// tokens, and the one-rank engine's logprobs (the same fused path at world size 1).
TEST_F(TensorParallel, FusedDecodeStepsMatchOneRank) {
  struct FusedRows {  // set for this test's backends and ranks only
    FusedRows() { setenv("KESTREL_FUSED_MAX_ROWS", "8", 1); }
    ~FusedRows() { unsetenv("KESTREL_FUSED_MAX_ROWS"); }
  } fused_rows;
  for (const char* name : {"qwen3_tiny", "qwen2_tiny", "llama_tiny"}) {
    const Fixture f = load_fixture(name);
    LLM one(f.dir, cpu_config(1));
    const auto want = one.generate(f.prompts, greedy_params(20, 5), false);
    for (int tp : {2, 4}) {
      const std::string what =
          std::string(name) + " fused at tensor_parallel_size " + std::to_string(tp);
      LLM llm(f.dir, cpu_config(tp));
      const auto got = llm.generate(f.prompts, greedy_params(20, 5), false);
      EXPECT_EQ(tokens_of(got), f.greedy) << what;
      expect_same_logprobs(got, want, what);
    }
  }
}

// The engine invariants of tests/runtime/llm_test.cc, at 2 ranks, against HF's tokens.
TEST_F(TensorParallel, EngineInvariantsHold) {
  const Fixture f = load_fixture("qwen3_tiny");
  {
    LLM llm(f.dir, cpu_config(2));
    for (size_t i = 0; i < f.prompts.size(); ++i) {
      EXPECT_EQ(tokens_of(llm.generate({f.prompts[i]}, greedy_params(20), false))[0], f.greedy[i])
          << "one at a time, prompt " << i;
    }
    // Now every full prompt block is cached.
    EXPECT_EQ(tokens_of(llm.generate(f.prompts, greedy_params(20), false)), f.greedy)
        << "prefix hits";
    EXPECT_GT(llm.stats().prefix_cache_hit_rate, 0.2);
  }
  {
    EngineConfig c = cpu_config(2);
    c.max_num_batched_tokens = 7;
    c.block_size = 4;
    LLM llm(f.dir, c);
    EXPECT_EQ(tokens_of(llm.generate(f.prompts, greedy_params(20), false)), f.greedy)
        << "chunked prefill";
  }
  {
    EngineConfig c = cpu_config(2);
    c.enable_chunked_prefill = false;
    c.enable_prefix_caching = false;
    LLM llm(f.dir, c);
    EXPECT_EQ(tokens_of(llm.generate(f.prompts, greedy_params(20), false)), f.greedy)
        << "no chunking, no cache";
  }
  {
    EngineConfig c = cpu_config(2);
    c.block_size = 4;
    c.num_kv_blocks = 24;
    LLM llm(f.dir, c);
    EXPECT_EQ(tokens_of(llm.generate(f.prompts, greedy_params(20), false)), f.greedy)
        << "preemption";
    EXPECT_GT(llm.stats().num_preemptions, 0) << "the KV cache was meant to force preemption";
  }
}

TEST_F(TensorParallel, SeededSamplingMatchesOneRank) {
  const Fixture f = load_fixture("qwen2_tiny");
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  p.seed = 77;
  p.max_tokens = 12;
  p.ignore_eos = true;
  LLM one(f.dir, cpu_config(1));
  LLM two(f.dir, cpu_config(2));
  EXPECT_EQ(tokens_of(two.generate(f.prompts, p, false)),
            tokens_of(one.generate(f.prompts, p, false)));
}

TEST_F(TensorParallel, SizeThatDoesNotDivideTheHeadsIsAClearError) {
  const Fixture f = load_fixture("qwen3_tiny");
  try {
    LLM llm(f.dir, cpu_config(3));
    FAIL() << "tensor_parallel_size 3 on 4 query heads was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("query heads"), std::string::npos) << e.what();
  }
}

// qwen3_tiny with fp8 KV scales in its checkpoint, small enough that many values clamp: its
// fp8 tokens differ from the unquantized cache's, so ranks that did not quantize their heads
// (the setting lost on its way to them) or took another rank's scales would show.
std::string qwen3_tiny_with_small_kv_scales() {
  const fs::path src = fs::path(KESTREL_SOURCE_DIR) / "tests/data/hf/qwen3_tiny";
  const fs::path dir = fs::path(KESTREL_BINARY_DIR) / "tp_engine_test" / "qwen3_tiny_kv_scales";
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* name : {"config.json", "generation_config.json"}) fs::copy(src / name, dir / name);
  const auto weights = SafetensorsFile::open((src / "model.safetensors").string());
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, info] : weights->tensors()) tensors.emplace_back(name, info.view());
  for (int l = 0; l < 3; ++l) {
    for (const char* kv : {"k_scale", "v_scale"}) {
      Tensor t = Tensor::host(DType::kF32, {2});  // per KV head, each its own
      t.data_as<float>()[0] = kv[0] == 'k' ? 0x1p-8f : 0x1p-9f;
      t.data_as<float>()[1] = kv[0] == 'k' ? 0x1p-7f : 0x1p-10f;
      tensors.emplace_back("model.layers." + std::to_string(l) + ".self_attn." + kv, t);
    }
  }
  write_safetensors((dir / "model.safetensors").string(), tensors);
  return dir.string();
}

// An fp8 KV cache at 2 ranks (one KV head each) and 4 (each head replicated on two): the
// one-rank fp8 engine's tokens, and its clamp count: every rank's heads, each once (rank 0's
// alone would be a part; a replica counted again, more).
TEST_F(TensorParallel, Fp8KvCacheMatchesOneRank) {
  const Fixture f = load_fixture("qwen3_tiny");
  const std::string dir = qwen3_tiny_with_small_kv_scales();
  EngineConfig c = cpu_config(1);
  c.kv_cache_dtype = "fp8";
  LLM one(dir, c);
  const auto want = tokens_of(one.generate(f.prompts, greedy_params(20), false));
  const int64_t all_clamped = one.stats().kv_cache_clamped;
  ASSERT_GT(all_clamped, 0);
  ASSERT_NE(want, f.greedy) << "the scales were meant to change the tokens";
  for (int tp : {2, 4}) {
    c.tensor_parallel_size = tp;
    LLM llm(dir, c);
    EXPECT_EQ(tokens_of(llm.generate(f.prompts, greedy_params(20), false)), want)
        << "tensor_parallel_size " << tp;
    EXPECT_EQ(llm.stats().kv_cache_dtype, "fp8_e4m3");
    EXPECT_EQ(llm.stats().kv_cache_clamped, all_clamped) << "tensor_parallel_size " << tp;
    // A read between requests (the group joins it outside any step), then the group still
    // serves.
    EXPECT_EQ(llm.kv_cache_clamped(), all_clamped) << "tensor_parallel_size " << tp;
    EXPECT_EQ(tokens_of(llm.generate({f.prompts[0]}, greedy_params(20), false))[0], want[0]);
  }
}

using test::child_pids;
using test::child_pids;

// A rank killed mid-run: the next step fails within seconds with an Error naming the rank,
// and every other rank ends by itself.
TEST_F(TensorParallel, KilledRankFailsTheGroupWithoutHanging) {
  const Fixture f = load_fixture("qwen3_tiny");
  auto llm = std::make_unique<LLM>(f.dir, cpu_config(4));
  EXPECT_EQ(tokens_of(llm->generate({f.prompts[0]}, greedy_params(20), false))[0], f.greedy[0]);
  const std::vector<pid_t> ranks = child_pids();
  ASSERT_EQ(ranks.size(), 3u);
  ASSERT_EQ(kill(ranks[1], SIGKILL), 0);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    llm->generate(f.prompts, greedy_params(20), false);
    FAIL() << "the group went on without a rank";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("killed by signal 9"), std::string::npos) << what;
    EXPECT_NE(what.find("tensor-parallel rank"), std::string::npos) << what;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  // Later calls fail at once with the same error.
  EXPECT_THROW(llm->generate({f.prompts[0]}, greedy_params(4), false), Error);
  // The surviving ranks end without waiting for the LLM to go.
  const auto t1 = std::chrono::steady_clock::now();
  while (!child_pids().empty() &&
         std::chrono::steady_clock::now() - t1 < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(child_pids().empty()) << "ranks still running 10 s after the failure";
  llm.reset();
}

}  // namespace
}  // namespace kestrel
