// The engine invariants on the GPU (DESIGN.md, "How correctness is known"): batched, one at a
// time, chunked prefill, no prefix cache, forced preemption, prefix-cache hits, CUDA graphs
// and --enforce-eager all give HF's greedy tokens (on every step whose HF margin is clear of
// the bf16 noise, see gpu_test_util.h), so they agree with each other there. Also: graphs
// are really replayed, padded graph batches match eager ones, and the KV cache is sized
// from a profile. Every test skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <span>
#include <vector>

#include "core/error.h"
#include "io/model_config.h"
#include "../engine/mod_three_constraint.h"
#include "gpu_test_util.h"

namespace kestrel::test {
namespace {

// Runs every fixture's prompts under `config` and checks HF's tokens on clear margins.
void expect_hf_tokens(const EngineConfig& config, const char* what, bool one_at_a_time = false,
                      int passes = 1) {
  for (const FixtureOracle& o : fixture_oracles()) {
    const HfFixture& f = o.fixture;
    TestEngine engine(f.dir, config);
    for (int pass = 0; pass < passes; ++pass) {
      std::vector<CompletionOutput> outs;
      if (one_at_a_time) {
        for (const auto& prompt : f.prompts) outs.push_back(engine.generate({prompt}, {greedy(20)})[0]);
      } else {
        outs = engine.generate(f.prompts, {greedy(20)});
      }
      for (size_t p = 0; p < f.prompts.size(); ++p) {
        const GreedyMatch m =
            match_greedy(outs[p].token_ids, f.greedy[p], o.margins[p], o.threshold());
        EXPECT_TRUE(m.all_equal) << what << " (pass " << pass << "): " << f.name << " prompt "
                                 << p << ": " << m.first_mismatch;
        EXPECT_EQ(outs[p].token_ids.size(), 20u) << what;
      }
    }
    if (passes > 1) {
      EXPECT_GT(engine.engine().stats().prefix_cache_hit_rate, 0.2) << what << ": " << f.name;
    }
  }
}

TEST(EngineGpu, BatchedWithGraphs) { KS_SKIP_WITHOUT_GPU(); expect_hf_tokens(gpu_config(), "batched"); }

TEST(EngineGpu, EnforceEager) {
  KS_SKIP_WITHOUT_GPU();
  EngineConfig c = gpu_config();
  c.enforce_eager = true;
  expect_hf_tokens(c, "eager");
}

TEST(EngineGpu, OneAtATime) {
  KS_SKIP_WITHOUT_GPU();
  expect_hf_tokens(gpu_config(), "one at a time", /*one_at_a_time=*/true);
}

TEST(EngineGpu, ChunkedPrefill) {
  KS_SKIP_WITHOUT_GPU();
  EngineConfig c = gpu_config();
  c.max_num_batched_tokens = 7;  // prompts of 16..64 tokens split into many chunks
  c.block_size = 4;
  expect_hf_tokens(c, "chunked prefill");
}

TEST(EngineGpu, NoChunkingNoPrefixCache) {
  KS_SKIP_WITHOUT_GPU();
  EngineConfig c = gpu_config();
  c.enable_chunked_prefill = false;
  c.enable_prefix_caching = false;
  expect_hf_tokens(c, "no chunking, no prefix cache");
}

TEST(EngineGpu, PrefixCacheHits) {
  KS_SKIP_WITHOUT_GPU();
  expect_hf_tokens(gpu_config(), "prefix cache hits", false, /*passes=*/2);
}

TEST(EngineGpu, ForcedPreemption) {
  KS_SKIP_WITHOUT_GPU();
  EngineConfig c = gpu_config();
  c.block_size = 4;
  c.num_kv_blocks = 24;  // 96 token slots: the longest sequence (64 + 20) fits alone only
  const FixtureOracle& o = fixture_oracles().front();
  TestEngine engine(o.fixture.dir, c);
  const auto outs = engine.generate(o.fixture.prompts, {greedy(20)});
  for (size_t p = 0; p < outs.size(); ++p) {
    const GreedyMatch m = match_greedy(outs[p].token_ids, o.fixture.greedy[p], o.margins[p], o.threshold());
    EXPECT_TRUE(m.all_equal) << "prompt " << p << ": " << m.first_mismatch;
  }
  EXPECT_GT(engine.engine().stats().num_preemptions, 0) << "the tiny cache was meant to preempt";
}

// 20 sequences (each fixture prompt four times, with 5..20 new tokens) so that decode
// batches shrink through many graph sizes, with padding rows in most of them. Graph replay
// must give what eager execution gives: the same tokens, and log-probabilities within the
// noise of bf16 arithmetic (different GEMM shapes round differently), step by step.
TEST(EngineGpu, GraphReplayMatchesEager) {
  KS_SKIP_WITHOUT_GPU();
  for (const FixtureOracle& o : fixture_oracles()) {
    const HfFixture& f = o.fixture;
    std::vector<std::vector<int>> prompts;
    std::vector<SamplingParams> params;
    std::vector<size_t> source;
    for (int copy = 0; copy < 4; ++copy) {
      for (size_t p = 0; p < f.prompts.size(); ++p) {
        prompts.push_back(f.prompts[p]);
        params.push_back(greedy(5 + static_cast<int>((copy * 5 + p) % 16), 4));
        source.push_back(p);
      }
    }
    EngineConfig eager_config = gpu_config();
    eager_config.enforce_eager = true;
    TestEngine graphs(f.dir, gpu_config());
    TestEngine eager(f.dir, eager_config);
    const auto a = graphs.generate(prompts, params);
    const auto b = eager.generate(prompts, params);
    EXPECT_EQ(graphs.runner().stats().num_graphs, 7) << "sizes 1, 2, 4, 8, 16, 24, 32";
    EXPECT_GT(graphs.runner().stats().graph_steps, 10);
    EXPECT_EQ(eager.runner().stats().graph_steps, 0);
    for (size_t i = 0; i < prompts.size(); ++i) {
      const size_t p = source[i];
      const GreedyMatch m = match_greedy(a[i].token_ids, f.greedy[p], o.margins[p], o.threshold());
      EXPECT_TRUE(m.all_equal) << f.name << " graphs, sequence " << i << ": " << m.first_mismatch;
      for (size_t k = 0; k < a[i].token_ids.size() && k < b[i].token_ids.size(); ++k) {
        if (a[i].token_ids[k] != b[i].token_ids[k]) break;
        EXPECT_NEAR(a[i].logprobs[k].logprob, b[i].logprobs[k].logprob, 2.0 * o.max_abs_error + 0.02)
            << f.name << " sequence " << i << " step " << k;
      }
    }
  }
}

// Runs `params` (ignore_eos: every end known ahead, so both engines schedule alike) through
// an overlapped and a synchronous engine, graphs and eager, and expects the same tokens and
// log-probabilities bit for bit. Returns the overlapped engines' overlapped-step fraction,
// the lower of the two.
double expect_overlap_gives_sync_outputs(const HfFixture& f, const std::vector<std::vector<int>>& prompts,
                                         const std::vector<SamplingParams>& params) {
  double overlapped_fraction = 1.0;
  for (bool eager : {false, true}) {
    EngineConfig overlapped = gpu_config();
    overlapped.enforce_eager = eager;
    EngineConfig sync = overlapped;
    sync.async_scheduling = false;
    TestEngine a(f.dir, overlapped);
    TestEngine b(f.dir, sync);
    const auto got = a.generate(prompts, params);
    const auto want = b.generate(prompts, params);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(got[i].token_ids, want[i].token_ids) << "eager " << eager << " sequence " << i;
      EXPECT_EQ(got[i].logprobs.size(), want[i].logprobs.size());
      for (size_t k = 0; k < got[i].logprobs.size() && k < want[i].logprobs.size(); ++k) {
        EXPECT_EQ(got[i].logprobs[k].logprob, want[i].logprobs[k].logprob)
            << "eager " << eager << " sequence " << i << " step " << k;
      }
    }
    const auto& stats = a.engine().stats();
    EXPECT_EQ(stats.num_steps, b.engine().stats().num_steps);
    EXPECT_EQ(b.engine().stats().num_overlapped_steps, 0);
    overlapped_fraction = std::min(overlapped_fraction,
                                   static_cast<double>(stats.num_overlapped_steps) / std::max<int64_t>(1, stats.num_steps));
  }
  return overlapped_fraction;
}

// The engine's overlap feeds each decode's input token on the device, from the sampler of
// the step before (token feedback), through graphs and eager steps alike. It must give bit
// for bit what the synchronous engine gives, seeded sampling and log-probabilities included.
TEST(EngineGpu, OverlapMatchesSynchronousSteps) {
  KS_SKIP_WITHOUT_GPU();
  const HfFixture& f = fixture_oracles().front().fixture;
  std::vector<std::vector<int>> prompts;
  std::vector<SamplingParams> params;
  for (int copy = 0; copy < 3; ++copy) {
    for (size_t p = 0; p < f.prompts.size(); ++p) {
      prompts.push_back(f.prompts[p]);
      SamplingParams s;
      s.temperature = copy == 0 ? 0.0f : 0.8f;
      s.top_p = copy == 2 ? 0.9f : 1.0f;
      s.seed = 100 + copy * 10 + static_cast<int>(p);
      s.ignore_eos = true;
      s.max_tokens = 4 + static_cast<int>((copy * 7 + p * 3) % 17);
      s.logprobs = 2;
      params.push_back(s);
    }
  }
  expect_overlap_gives_sync_outputs(f, prompts, params);
}

// The fixture's prompts twice, row i (0..) greedy in the first copy and at temperature
// `temperature` in the second, seeded `seed + i`, ignore_eos; `edit(i, params)` adds the rest.
template <typename Edit>
void twice_each_prompt(const HfFixture& f, float temperature, int seed, Edit edit,
                       std::vector<std::vector<int>>& prompts, std::vector<SamplingParams>& params) {
  for (int copy = 0; copy < 2; ++copy) {
    for (size_t p = 0; p < f.prompts.size(); ++p) {
      const size_t i = copy * f.prompts.size() + p;
      prompts.push_back(f.prompts[p]);
      SamplingParams s;
      s.temperature = copy == 0 ? 0.0f : temperature;
      s.seed = seed + static_cast<int>(i);
      s.ignore_eos = true;
      edit(i, s);
      params.push_back(s);
    }
  }
}

// Penalised rows overlap too where the CUDA sampler counts the token in flight from its
// feedback slot (Backend::samples_pending_tokens): the same outputs as settling each step
// first, with most steps launched while the one before ran. (That the kernel counts the
// pending token at all is CudaSamplingPending's test, on rows built to change without it.)
TEST(EngineGpu, PenalisedOverlapMatchesSynchronousSteps) {
  KS_SKIP_WITHOUT_GPU();
  const HfFixture& f = fixture_oracles().front().fixture;
  std::vector<std::vector<int>> prompts;
  std::vector<SamplingParams> params;
  twice_each_prompt(f, 0.8f, 300, [](size_t i, SamplingParams& s) {
    s.top_k = i % 4 == 3 ? 20 : -1;
    s.max_tokens = 8 + static_cast<int>((i * 5) % 13);
    s.repetition_penalty = i % 3 == 0 ? 1.3f : 1.0f;
    s.presence_penalty = i % 3 == 1 ? 0.8f : 0.0f;
    s.frequency_penalty = i % 3 == 2 ? 0.6f : 0.2f;
    if (i % 2 == 0) s.logprobs = 2;
  }, prompts, params);
  const double fraction = expect_overlap_gives_sync_outputs(f, prompts, params);
  EXPECT_GE(fraction, 0.5) << "penalised steps still settle first";
}

// Constrained rows overlap their forwards (the sampling waits for the step before to settle:
// ModelExecutor::launch_sampling) and give the synchronous engine's tokens, graphs and eager.
// The runner defers sampling by default (KESTREL_DEFER_SAMPLING=0 turns it off).
TEST(EngineGpu, ConstrainedOverlapMatchesSynchronousSteps) {
  KS_SKIP_WITHOUT_GPU();
  const HfFixture& f = fixture_oracles().front().fixture;
  ASSERT_EQ(unsetenv("KESTREL_DEFER_SAMPLING"), 0);
  auto factory = std::make_shared<testing::ModThreeFactory>(load_model_config(f.dir).vocab_size);
  std::vector<std::vector<int>> prompts;
  std::vector<SamplingParams> params;
  twice_each_prompt(f, 0.9f, 500, [&](size_t i, SamplingParams& s) {
    s.max_tokens = 6 + static_cast<int>((i * 7) % 11);
    if (i % 3 != 2) s.constraint = factory;  // some rows free, in the same steps
    if (i % 4 == 0) s.logprobs = 1;
  }, prompts, params);
  const double fraction = expect_overlap_gives_sync_outputs(f, prompts, params);
  EXPECT_GE(fraction, 0.5) << "constrained steps still settle first";
}

// Without num_kv_blocks the cache comes from a profile of the largest step: some blocks,
// the activations counted, and more than one full-length sequence's worth.
TEST(EngineGpu, KvCacheSizedFromProfile) {
  KS_SKIP_WITHOUT_GPU();
  const FixtureOracle& o = fixture_oracles().front();
  EngineConfig c = gpu_config();
  c.num_kv_blocks = 0;
  c.gpu_memory_utilization = 0.3f;
  // A tiny model's activations at 512 tokens fit in the pool's slack; at 65536 tokens the
  // bf16 buffers that must be live together in the MLP (the residual stream, the normed
  // hidden state and gate_up) are tens of MiB, a lower bound on what the profile sees.
  c.max_num_batched_tokens = 65536;
  TestEngine engine(o.fixture.dir, c);
  const ModelRunner& r = engine.runner();
  const ModelConfig& mc = r.model_config();
  const int64_t per_token = 2 * (2 * int64_t{mc.hidden_size} + 2 * int64_t{mc.intermediate_size});
  const MemoryInfo m = engine.runner().backend().memory_info();
  EXPECT_GE(static_cast<double>(r.stats().activation_bytes), 65536.0 * per_token);
  EXPECT_GT(r.stats().kv_max_concurrency, 1.0);
  // The cache took what the share left: the device is now used to about the share (the
  // graphs and the rounding to whole blocks are well under 2% of it).
  EXPECT_LT(static_cast<double>(r.kv_cache_bytes()), 0.3 * m.total);
  EXPECT_NEAR(static_cast<double>(m.total - m.free), 0.3 * m.total, 0.02 * m.total);
  const auto outs = engine.generate({o.fixture.prompts[2]}, {greedy(20)});
  const GreedyMatch g = match_greedy(outs[0].token_ids, o.fixture.greedy[2], o.margins[2], o.threshold());
  EXPECT_TRUE(g.all_equal) << g.first_mismatch;
}

TEST(EngineGpu, ModelThatDoesNotFitSaysByHowMuch) {
  KS_SKIP_WITHOUT_GPU();
  EngineConfig c = gpu_config();
  c.num_kv_blocks = 0;
  c.gpu_memory_utilization = 0.001f;  // less than the CUDA context alone
  try {
    TestEngine engine(fixture_oracles().front().fixture.dir, c);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("short by"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kestrel::test
