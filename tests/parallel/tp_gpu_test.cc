// Tensor parallelism on several GPUs (issue #13's correctness runs): N ranks, one GPU each,
// NCCL inside the CUDA graphs, against HF's greedy tokens (on steps whose HF top-2 margin
// is clear of the bf16 noise, gpu_test_util.h) and against the one-GPU engine's logprobs.
// And a rank killed mid-run. Every test skips, saying so, with fewer GPUs than it needs.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

#include "../runtime_gpu/gpu_test_util.h"
#include "kestrel/llm.h"
#include "runtime/tp_worker.h"
#include "child_processes.h"
#include "worker_registry.h"

namespace kestrel::test {
namespace {

KS_TP_WORKER(gpu_engine) { return run_tensor_parallel_worker(self); }

#define KS_SKIP_WITH_FEWER_GPUS(n)                                                          \
  if (cuda_device_count() < (n))                                                            \
  GTEST_SKIP() << (n) << " GPUs needed for tensor_parallel_size " << (n) << ", "            \
               << cuda_device_count() << " visible"

EngineConfig tp_gpu_config(int tp) {
  EngineConfig c = gpu_config();
  c.tensor_parallel_size = tp;
  return c;
}

std::vector<CompletionOutput> run(LLM& llm, const HfFixture& f, const SamplingParams& p) {
  std::vector<CompletionOutput> out;
  for (RequestOutput& r : llm.generate(f.prompts, p, false)) out.push_back(r.outputs.at(0));
  return out;
}

// bf16 activations reduced in another order (N partial sums): logprobs move by about the
// bf16 rounding of the logits, which the fixtures' margin noise measures (~0.2-0.7 on
// logits of these random models); 0.5 on a logprob still catches a wrong shard.
constexpr double kLogprobTolerance = 0.5;

void expect_matches_one_gpu(int tp) {
  setenv(kWorkerEnv, "gpu_engine", 1);
  for (const FixtureOracle& o : fixture_oracles()) {
    const HfFixture& f = o.fixture;
    LLM one(f.dir, gpu_config());
    const auto want = run(one, f, greedy(20, 5));
    LLM many(f.dir, tp_gpu_config(tp));
    const auto got = run(many, f, greedy(20, 5));
    double worst = 0;
    for (size_t p = 0; p < f.prompts.size(); ++p) {
      const GreedyMatch m = match_greedy(got[p].token_ids, f.greedy[p], o.margins[p], o.threshold());
      EXPECT_TRUE(m.all_equal) << "tp " << tp << ": " << f.name << " prompt " << p << ": "
                               << m.first_mismatch;
      // Logprobs are comparable while both engines followed the same tokens.
      for (size_t t = 0; t < got[p].logprobs.size() && t < want[p].logprobs.size(); ++t) {
        if (got[p].token_ids[t] != want[p].token_ids[t]) break;
        worst = std::max(worst, double(std::abs(got[p].logprobs[t].logprob - want[p].logprobs[t].logprob)));
      }
    }
    std::printf("[ tp %d gpus ] %s: max |logprob - one GPU's| %.3g\n", tp, f.name.c_str(), worst);
    EXPECT_LE(worst, kLogprobTolerance) << f.name;
  }
}

TEST(TensorParallelGpu, TwoGpusMatchHfAndOneGpu) {
  KS_SKIP_WITH_FEWER_GPUS(2);
  expect_matches_one_gpu(2);
}

TEST(TensorParallelGpu, FourGpusMatchHfAndOneGpu) {
  KS_SKIP_WITH_FEWER_GPUS(4);
  expect_matches_one_gpu(4);
}

TEST(TensorParallelGpu, MoreRanksThanGpusIsAClearError) {
  KS_SKIP_WITHOUT_GPU();
  const int n = cuda_device_count() + 1;
  const HfFixture f = load_hf_fixtures().front();
  try {
    LLM llm(f.dir, tp_gpu_config(n));
    FAIL() << "tensor_parallel_size " << n << " started on " << n - 1 << " GPUs";
  } catch (const Error& e) {
    // A size the model cannot be split by fails first, as clearly.
    const std::string what = e.what();
    EXPECT_TRUE(what.find("GPUs on this host") != std::string::npos ||
                what.find("does not divide") != std::string::npos)
        << what;
  }
}

// The vocab-parallel sampler (each rank samples its LM-head columns) against the gathered
// logits sampled by rank 0, both at TP=2: the same logits, so the same tokens bit for bit.
// Seeded temperature rows and greedy rows take the vocab-parallel path; a batch with one
// top_p row is gathered whole; the runs in between show which path each took.
TEST(TensorParallelGpu, VocabParallelSamplingMatchesTheGatheredLogits) {
  KS_SKIP_WITH_FEWER_GPUS(2);
  setenv(kWorkerEnv, "gpu_engine", 1);
  const HfFixture f = load_hf_fixtures().front();
  std::vector<SamplingParams> sampled(f.prompts.size());
  for (size_t i = 0; i < sampled.size(); ++i) {
    sampled[i].temperature = i % 3 == 0 ? 0.0f : 0.6f + 0.3f * static_cast<float>(i % 3);
    sampled[i].seed = 100 + static_cast<int64_t>(i);
    sampled[i].max_tokens = 40;
    sampled[i].ignore_eos = true;
  }
  std::vector<SamplingParams> mixed = sampled;
  mixed.back().top_p = 0.9f;
  auto tokens = [&](LLM& llm, const std::vector<SamplingParams>& p) {
    std::vector<std::vector<int>> out;
    for (RequestOutput& r : llm.generate(f.prompts, p, false)) out.push_back(r.outputs.at(0).token_ids);
    return out;
  };
  setenv("KESTREL_TP_VOCAB_SAMPLING", "0", 1);
  std::vector<std::vector<int>> want_sampled, want_mixed;
  {
    LLM gathered(f.dir, tp_gpu_config(2));
    want_sampled = tokens(gathered, sampled);
    want_mixed = tokens(gathered, mixed);
    EXPECT_EQ(gathered.stats().vocab_parallel_steps, 0);
  }
  unsetenv("KESTREL_TP_VOCAB_SAMPLING");
  LLM sharded(f.dir, tp_gpu_config(2));
  EXPECT_EQ(tokens(sharded, sampled), want_sampled);
  const int64_t steps = sharded.stats().vocab_parallel_steps;
  EXPECT_GE(steps, 39) << "the decode steps of 40 tokens";
  EXPECT_EQ(tokens(sharded, mixed), want_mixed);
  // Every step of the mixed batch had the top_p row: none was vocab-parallel.
  EXPECT_EQ(sharded.stats().vocab_parallel_steps, steps);
  std::printf("[ tp 2 gpus ] vocab-parallel steps: %lld of %lld\n",
              static_cast<long long>(sharded.stats().vocab_parallel_steps),
              static_cast<long long>(sharded.stats().num_steps));
}

// A rank's process killed while the group decodes: the step fails within seconds, naming it.
TEST(TensorParallelGpu, KilledRankFailsTheGroup) {
  KS_SKIP_WITH_FEWER_GPUS(2);
  setenv(kWorkerEnv, "gpu_engine", 1);
  const HfFixture f = load_hf_fixtures().front();
  LLM llm(f.dir, tp_gpu_config(2));
  run(llm, f, greedy(4));
  const std::vector<pid_t> ranks = child_pids();  // the only child: rank 1
  ASSERT_EQ(ranks.size(), 1u);
  const pid_t worker = ranks[0];
  ASSERT_GT(worker, 0);
  ASSERT_EQ(kill(worker, SIGKILL), 0);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    run(llm, f, greedy(200));
    FAIL() << "the group went on without rank 1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor-parallel rank 1"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(15));
  EXPECT_FALSE(llm.fatal_error().empty());
}

}  // namespace
}  // namespace kestrel::test
