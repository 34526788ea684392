// The tensor-parallel path on one GPU: KESTREL_TP_ALWAYS=1 makes a runner load the model
// through a one-rank NCCL communicator (vocab-sharded embedding, all-reduces after o_proj
// and down, the LM head's column gather), inside the CUDA graphs and eagerly. Its greedy
// tokens must be the plain runner's and its logprobs agree with them. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdlib>

#include "backend/cuda/collectives/nccl_communicator.h"
#include "gpu_test_util.h"
#include "kestrel/llm.h"
#include "parallel/communicator.h"

namespace kestrel::test {
namespace {

struct TpAlways {
  TpAlways() { setenv("KESTREL_TP_ALWAYS", "1", 1); }
  ~TpAlways() { unsetenv("KESTREL_TP_ALWAYS"); }
};

// The TP path runs the unfused ops at every batch size, and the plain one the fused GEMVs
// for small steps; both round to bf16 at the same points (backend.h), and a one-rank
// all-reduce adds nothing, so the logprobs are the same bits (0 difference on the H100,
// docs/parallel.md).
constexpr double kLogprobTolerance = 0.0;

void expect_same_outputs(const EngineConfig& config, const char* what) {
  for (const FixtureOracle& o : fixture_oracles()) {
    const HfFixture& f = o.fixture;
    TestEngine plain(f.dir, config);
    ASSERT_EQ(plain.runner().communicator(), nullptr);
    const auto want = plain.generate(f.prompts, {greedy(20, 5)});
    std::vector<CompletionOutput> got;
    {
      TpAlways on;
      TestEngine tp(f.dir, config);
      ASSERT_NE(tp.runner().communicator(), nullptr) << what;
      EXPECT_EQ(tp.runner().communicator()->name(), "nccl");
      got = tp.generate(f.prompts, {greedy(20, 5)});
      if (!config.enforce_eager) {
        EXPECT_GT(tp.runner().stats().graph_steps, 0) << what;
      }
    }
    double worst = 0;
    for (size_t p = 0; p < f.prompts.size(); ++p) {
      EXPECT_EQ(got[p].token_ids, want[p].token_ids) << what << ": " << f.name << " prompt " << p;
      ASSERT_EQ(got[p].logprobs.size(), want[p].logprobs.size());
      for (size_t t = 0; t < got[p].logprobs.size(); ++t) {
        worst = std::max(worst, double(std::abs(got[p].logprobs[t].logprob - want[p].logprobs[t].logprob)));
        for (size_t k = 0; k < got[p].logprobs[t].top.size() && k < want[p].logprobs[t].top.size(); ++k) {
          worst = std::max(worst, double(std::abs(got[p].logprobs[t].top[k].second -
                                                  want[p].logprobs[t].top[k].second)));
        }
      }
    }
    std::printf("[ tp world 1 ] %s %s: max |logprob difference| %.3g\n", what, f.name.c_str(), worst);
    EXPECT_LE(worst, kLogprobTolerance) << what << ": " << f.name;
  }
}

TEST(TensorParallelWorld1, GraphsMatchThePlainRunner) {
  KS_SKIP_WITHOUT_GPU();
  if (!nccl_available()) GTEST_SKIP() << "this build has no NCCL";
  expect_same_outputs(gpu_config(), "graphs");
}

TEST(TensorParallelWorld1, EagerMatchesThePlainRunner) {
  KS_SKIP_WITHOUT_GPU();
  if (!nccl_available()) GTEST_SKIP() << "this build has no NCCL";
  EngineConfig c = gpu_config();
  c.enforce_eager = true;
  expect_same_outputs(c, "eager");
}

// Through LLM, KESTREL_TP_ALWAYS=1 runs the whole tensor-parallel executor with a group of
// rank 0 alone: the step broadcast, the overlap (async scheduling) with pending tokens
// shared through the token-feedback broadcast, graphs with NCCL inside. Same outputs.
TEST(TensorParallelWorld1, ExecutorMatchesThePlainEngine) {
  KS_SKIP_WITHOUT_GPU();
  if (!nccl_available()) GTEST_SKIP() << "this build has no NCCL";
  for (const FixtureOracle& o : fixture_oracles()) {
    const HfFixture& f = o.fixture;
    std::vector<RequestOutput> want, got;
    {
      LLM plain(f.dir, gpu_config());
      want = plain.generate(f.prompts, greedy(20, 5), false);
    }
    {
      TpAlways on;
      LLM tp(f.dir, gpu_config());
      EXPECT_EQ(tp.stats().communicator, "nccl");
      got = tp.generate(f.prompts, greedy(20, 5), false);
      EXPECT_GT(tp.stats().graph_steps, 0);
      EXPECT_TRUE(tp.fatal_error().empty());
    }
    for (size_t p = 0; p < f.prompts.size(); ++p) {
      const CompletionOutput& a = got[p].outputs.at(0);
      const CompletionOutput& b = want[p].outputs.at(0);
      EXPECT_EQ(a.token_ids, b.token_ids) << f.name << " prompt " << p;
      ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
      for (size_t t = 0; t < a.logprobs.size(); ++t) {
        EXPECT_EQ(a.logprobs[t].logprob, b.logprobs[t].logprob) << f.name << " prompt " << p << " token " << t;
      }
    }
  }
}

}  // namespace
}  // namespace kestrel::test
