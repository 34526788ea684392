// End-to-end engine tests on the CPU backend against Hugging Face transformers' greedy
// continuations (tests/data/hf, made by tools/make_hf_fixture.py), and the engine
// invariants: batched == one at a time, chunked prefill, prefix caching and forced
// preemption all give HF's tokens.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "cpu_config.h"
#include "kestrel/llm.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

struct Fixture {
  std::string dir;
  std::vector<std::vector<int>> prompts;
  std::vector<std::vector<int>> greedy;
};

std::vector<Fixture> load_fixtures() {
  std::vector<Fixture> out;
  const fs::path root = fs::path(KESTREL_SOURCE_DIR) / "tests/data/hf";
  for (const auto& entry : fs::directory_iterator(root)) {
    if (!fs::exists(entry.path() / "expected.json")) continue;
    std::ifstream in(entry.path() / "expected.json");
    nlohmann::json j = nlohmann::json::parse(in);
    out.push_back({entry.path().string(), j["prompts"].get<std::vector<std::vector<int>>>(),
                   j["greedy"].get<std::vector<std::vector<int>>>()});
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.dir < b.dir; });
  return out;
}

SamplingParams greedy_params(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.ignore_eos = true;
  p.max_tokens = max_tokens;
  return p;
}

using test::cpu_config;

std::vector<std::vector<int>> tokens_of(const std::vector<RequestOutput>& outs) {
  std::vector<std::vector<int>> t;
  for (const RequestOutput& o : outs) t.push_back(o.outputs.at(0).token_ids);
  return t;
}

class HfGreedy : public ::testing::TestWithParam<std::string> {};

TEST(HfFixtures, Present) { ASSERT_GE(load_fixtures().size(), 5u); }

// Every engine configuration must reproduce HF's greedy tokens exactly.
void expect_hf_greedy(const Fixture& f, const EngineConfig& config, const char* what,
                      int64_t* preemptions = nullptr, double* hit_rate = nullptr) {
  LLM llm(f.dir, config);
  const auto outs = llm.generate(f.prompts, greedy_params(20), false);
  ASSERT_EQ(outs.size(), f.prompts.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    EXPECT_EQ(outs[i].outputs.at(0).token_ids, f.greedy[i])
        << what << ": " << f.dir << " prompt " << i << " (length " << f.prompts[i].size() << ")";
    EXPECT_EQ(outs[i].outputs[0].finish_reason, "length");
    EXPECT_EQ(outs[i].prompt_token_ids, f.prompts[i]);
  }
  if (preemptions) *preemptions = llm.stats().num_preemptions;
  if (hit_rate) *hit_rate = llm.stats().prefix_cache_hit_rate;
}

TEST(HfGreedyTest, BatchedMatchesHf) {
  for (const Fixture& f : load_fixtures()) expect_hf_greedy(f, cpu_config(), "batched");
}

TEST(HfGreedyTest, OneAtATimeMatchesHf) {
  for (const Fixture& f : load_fixtures()) {
    LLM llm(f.dir, cpu_config());
    for (size_t i = 0; i < f.prompts.size(); ++i) {
      const auto outs = llm.generate({f.prompts[i]}, greedy_params(20), false);
      EXPECT_EQ(outs.at(0).outputs.at(0).token_ids, f.greedy[i]) << f.dir << " prompt " << i;
    }
  }
}

TEST(HfGreedyTest, ChunkedPrefillMatchesHf) {
  EngineConfig c = cpu_config();
  c.max_num_batched_tokens = 7;  // prompts of 16..64 tokens are split into many chunks
  c.block_size = 4;
  for (const Fixture& f : load_fixtures()) expect_hf_greedy(f, c, "chunked prefill");
}

TEST(HfGreedyTest, NoChunkingNoPrefixCacheMatchesHf) {
  EngineConfig c = cpu_config();
  c.enable_chunked_prefill = false;
  c.enable_prefix_caching = false;
  for (const Fixture& f : load_fixtures()) expect_hf_greedy(f, c, "no chunking, no cache");
}

TEST(HfGreedyTest, ForcedPreemptionMatchesHf) {
  EngineConfig c = cpu_config();
  c.block_size = 4;
  c.num_kv_blocks = 24;  // 96 token slots: the longest sequence (64 + 20) fits alone only
  int64_t preemptions = 0;
  const Fixture f = load_fixtures().front();
  expect_hf_greedy(f, c, "tiny KV cache", &preemptions);
  EXPECT_GT(preemptions, 0) << "the KV cache was meant to force preemption";
}

TEST(HfGreedyTest, PrefixCacheHitsGiveSameTokens) {
  for (const Fixture& f : load_fixtures()) {
    LLM llm(f.dir, cpu_config());
    const auto first = tokens_of(llm.generate(f.prompts, greedy_params(20), false));
    // The second pass finds every full block of each prompt in the cache.
    const auto second = tokens_of(llm.generate(f.prompts, greedy_params(20), false));
    EXPECT_EQ(first, f.greedy) << f.dir;
    EXPECT_EQ(second, f.greedy) << f.dir;
    EXPECT_GT(llm.stats().prefix_cache_hit_rate, 0.2) << f.dir;
  }
}

TEST(Sampling, SeededSamplingIsReproducibleAcrossBatches) {
  const Fixture f = load_fixtures().front();
  LLM llm(f.dir, cpu_config());
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.9f;
  p.seed = 1234;
  p.max_tokens = 16;
  p.ignore_eos = true;
  const auto alone = llm.generate({f.prompts[3]}, p, false);
  const auto batched = llm.generate(f.prompts, p, false);
  EXPECT_EQ(alone[0].outputs[0].token_ids, batched[3].outputs[0].token_ids);
  p.seed = 99;
  const auto other = llm.generate({f.prompts[3]}, p, false);
  EXPECT_NE(alone[0].outputs[0].token_ids, other[0].outputs[0].token_ids);
}

// logit_bias through the engine, in one batch with a request without it: +100 makes a token
// every greedy pick (the fixtures' logits are far smaller), -100 keeps the unbiased pick
// out, and the request without a bias gets the tokens it gets alone.
TEST(Sampling, LogitBiasSteersOnlyItsOwnRequest) {
  const Fixture f = load_fixtures().front();
  LLM llm(f.dir, cpu_config());
  const SamplingParams plain = greedy_params(8);
  const auto alone = llm.generate({f.prompts[0], f.prompts[1]}, plain, false);
  SamplingParams forced = plain, banned = plain;
  forced.logit_bias = {{7, 100.0f}};
  banned.logit_bias = {{alone[1].outputs[0].token_ids[0], -100.0f}};
  const auto mixed = llm.generate({f.prompts[0], f.prompts[1], f.prompts[1]},
                                  {plain, forced, banned}, false);
  EXPECT_EQ(mixed[0].outputs[0].token_ids, alone[0].outputs[0].token_ids);
  EXPECT_EQ(mixed[1].outputs[0].token_ids, std::vector<int>(8, 7));
  ASSERT_FALSE(mixed[2].outputs[0].token_ids.empty());
  EXPECT_NE(mixed[2].outputs[0].token_ids[0], alone[1].outputs[0].token_ids[0]);
  for (int t : mixed[2].outputs[0].token_ids) EXPECT_NE(t, alone[1].outputs[0].token_ids[0]);
}

TEST(Sampling, ParallelSamplesShareThePrompt) {
  const Fixture f = load_fixtures().front();
  LLM llm(f.dir, cpu_config());
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 7;
  p.n = 4;
  p.max_tokens = 12;
  p.ignore_eos = true;
  const auto outs = llm.generate({f.prompts[4]}, p, false);
  ASSERT_EQ(outs[0].outputs.size(), 4u);
  std::set<std::vector<int>> distinct;
  for (const auto& c : outs[0].outputs) {
    EXPECT_EQ(c.token_ids.size(), 12u);
    distinct.insert(c.token_ids);
  }
  EXPECT_GT(distinct.size(), 1u);
  // Samples 1..3 found sample 0's prompt blocks (64 tokens = 4 full blocks of 16 each).
  EXPECT_GT(llm.stats().prefix_cache_hit_rate, 0.5);
}

// Runs the prompts on an overlapped (async_scheduling, the default) and a synchronous engine
// and checks every sample's tokens, finish reason and logprobs are the same; returns the two
// engines' stats.
std::pair<LLMStats, LLMStats> expect_overlap_gives_sync_outputs(
    const Fixture& f, const std::vector<SamplingParams>& params, std::vector<RequestOutput>* out) {
  EngineConfig sync_config = cpu_config();
  sync_config.async_scheduling = false;
  LLM overlapped(f.dir, cpu_config());
  LLM sync(f.dir, sync_config);
  const auto got = overlapped.generate(f.prompts, params, false);
  const auto want = sync.generate(f.prompts, params, false);
  EXPECT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    EXPECT_EQ(got[i].outputs.size(), want[i].outputs.size()) << i;
    for (size_t s = 0; s < got[i].outputs.size() && s < want[i].outputs.size(); ++s) {
      const CompletionOutput& a = got[i].outputs[s];
      const CompletionOutput& b = want[i].outputs[s];
      EXPECT_EQ(a.token_ids, b.token_ids) << "prompt " << i << " sample " << s;
      EXPECT_EQ(a.finish_reason, b.finish_reason) << "prompt " << i << " sample " << s;
      EXPECT_EQ(a.logprobs.size(), b.logprobs.size()) << "prompt " << i << " sample " << s;
      for (size_t k = 0; k < a.logprobs.size() && k < b.logprobs.size(); ++k) {
        EXPECT_EQ(a.logprobs[k].logprob, b.logprobs[k].logprob) << "prompt " << i << " step " << k;
        EXPECT_EQ(a.logprobs[k].top, b.logprobs[k].top) << "prompt " << i << " step " << k;
      }
    }
  }
  if (out != nullptr) *out = got;
  return {overlapped.stats(), sync.stats()};
}

// The engine's overlap must not change any output: seeded sampling, penalties, stop tokens
// and EOS (one wasted row each), logprobs and parallel samples.
TEST(Sampling, OverlapGivesTheSynchronousOutputs) {
  const Fixture f = load_fixtures().front();
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < f.prompts.size(); ++i) {
    SamplingParams p;
    p.temperature = i % 3 == 0 ? 0.0f : 1.0f;
    p.seed = 50 + i;
    p.max_tokens = 6 + static_cast<int>(i * 5 % 13);
    p.ignore_eos = i % 2 == 0;
    if (i % 2 == 1) p.logprobs = 3;
    if (i == 1) p.presence_penalty = 0.7f;
    if (i == 2) p.stop_token_ids = {f.greedy[i][4]};
    if (i == 3) p.n = 2;
    params.push_back(p);
  }
  std::vector<RequestOutput> got;
  const auto [overlapped, sync] = expect_overlap_gives_sync_outputs(f, params, &got);
  ASSERT_GT(got.size(), 2u);
  EXPECT_EQ(got[2].outputs[0].finish_reason, "stop");
  // Each stop or EOS costs the overlapped engine one wasted row, never a missing token.
  EXPECT_GE(overlapped.generation_tokens, sync.generation_tokens);
}

// Penalties count the token still in flight: without token feedback (the CPU backend) the
// runner feeds it to the sampler's output ids, so penalised requests overlap (every step
// after the first) and give the synchronous engine's tokens.
TEST(Sampling, PenalisedRequestsOverlapWithTheSynchronousOutputs) {
  const Fixture f = load_fixtures().front();
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < f.prompts.size(); ++i) {
    SamplingParams p;
    p.temperature = i % 2 == 0 ? 0.0f : 1.0f;
    p.seed = 70 + i;
    p.max_tokens = 12;
    p.ignore_eos = true;
    p.repetition_penalty = i % 3 == 0 ? 1.3f : 1.0f;
    p.presence_penalty = i % 3 == 1 ? 0.8f : 0.0f;
    p.frequency_penalty = i % 3 == 2 ? 0.6f : 0.2f;
    if (i == 1) p.logprobs = 2;
    params.push_back(p);
  }
  const auto [overlapped, sync] = expect_overlap_gives_sync_outputs(f, params, nullptr);
  EXPECT_EQ(sync.num_overlapped_steps, 0);
  EXPECT_GE(overlapped.num_overlapped_steps, overlapped.num_steps / 2) << overlapped.num_steps << " steps";
}

TEST(Errors, BadRequestsAreRejectedAndOthersGoOn) {
  const Fixture f = load_fixtures().front();
  LLM llm(f.dir, cpu_config());
  SamplingParams bad = greedy_params(4);
  bad.top_p = 1.5f;
  EXPECT_THROW(llm.generate({f.prompts[0]}, bad, false), Error);
  EXPECT_THROW(llm.generate(std::vector<std::vector<int>>{{1, 2, 100000}}, greedy_params(4), false), Error);  // id >= vocab
  EXPECT_THROW(llm.generate(std::vector<std::vector<int>>(1), greedy_params(4), false), Error);
  std::vector<int> too_long(llm.max_model_len() + 1, 5);
  EXPECT_THROW(llm.generate({too_long}, greedy_params(4), false), Error);
  // The engine still serves.
  EXPECT_EQ(tokens_of(llm.generate({f.prompts[1]}, greedy_params(20), false))[0], f.greedy[1]);
  EXPECT_FALSE(llm.has_unfinished());
}

TEST(Errors, BadModelDirectory) {
  EXPECT_THROW(LLM("/nonexistent/model", cpu_config()), Error);
  EngineConfig c = cpu_config();
  c.device = "tpu";
  EXPECT_THROW(LLM(load_fixtures().front().dir, c), Error);
}

}  // namespace
}  // namespace kestrel
