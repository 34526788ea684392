// Prompt logprobs (SamplingParams::prompt_logprobs) on the CPU backend against Hugging Face
// transformers: log_softmax of HF's fp32 logits at every prompt position (tests/data/hf,
// tools/make_hf_fixture.py), computed here in double. Whole prompts, prompts cut into chunks
// of 7 tokens with the rows read back 4 at a time, and the fused small-step path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../model/hf_fixtures.h"
#include "cpu_config.h"
#include "kestrel/llm.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

// Logprobs of HF's logits: |kestrel - HF| within this (the logits agree to 1e-4 of the row's
// largest magnitude, hf_fixture_test.cc; a logprob is a logit minus a log-sum-exp of them).
constexpr double kTolerance = 2e-3;

struct HfPrompts {
  std::string dir;
  std::vector<std::vector<int>> prompts;
  nlohmann::json logits;  // [prompt][position][vocab]
};

std::vector<HfPrompts> load() {
  std::vector<HfPrompts> out;
  for (const std::string& name : test::fixture_models()) {
    const fs::path dir = test::fixture_root() / name;
    std::ifstream in(dir / "expected.json");
    nlohmann::json j = nlohmann::json::parse(in);
    out.push_back({dir.string(), j["prompts"].get<std::vector<std::vector<int>>>(),
                   std::move(j["logits"])});
  }
  return out;
}

std::vector<double> log_softmax(const nlohmann::json& row) {
  std::vector<double> x = row.get<std::vector<double>>();
  const double m = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (double v : x) sum += std::exp(v - m);
  const double lse = m + std::log(sum);
  for (double& v : x) v -= lse;
  return x;
}

void expect_matches_hf(const HfPrompts& f, const EngineConfig& config, const std::string& how) {
  constexpr int kTop = 3;
  LLM llm(f.dir, config);
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 1;
  p.prompt_logprobs = kTop;
  const std::vector<RequestOutput> outs = llm.generate(f.prompts, p);
  ASSERT_EQ(outs.size(), f.prompts.size());
  for (size_t q = 0; q < f.prompts.size(); ++q) {
    const std::vector<int>& prompt = f.prompts[q];
    const std::vector<TokenLogprobs>& got = outs[q].prompt_logprobs;
    const std::string where = fs::path(f.dir).filename().string() + ", " + how + ", prompt " +
                              std::to_string(q);
    ASSERT_EQ(got.size(), prompt.size() - 1) << where;
    for (size_t i = 0; i < got.size(); ++i) {
      const std::vector<double> want = log_softmax(f.logits[q][i]);
      const int token = prompt[i + 1];
      ASSERT_EQ(got[i].token_id, token) << where << ", position " << i;
      EXPECT_NEAR(got[i].logprob, want[token], kTolerance) << where << ", position " << i;
      // The rank, where no other token is within the tolerance of this one.
      int above = 0;
      bool clear = true;
      for (size_t v = 0; v < want.size(); ++v) {
        if (static_cast<int>(v) == token) continue;
        above += want[v] > want[token];
        clear = clear && std::abs(want[v] - want[token]) > kTolerance;
      }
      if (clear) EXPECT_EQ(got[i].rank, 1 + above) << where << ", position " << i;
      // The top alternatives: HF's values for them, most likely first, and the first is HF's
      // most likely.
      ASSERT_EQ(got[i].top.size(), static_cast<size_t>(kTop)) << where << ", position " << i;
      for (size_t k = 0; k < got[i].top.size(); ++k) {
        const auto [id, logprob] = got[i].top[k];
        ASSERT_TRUE(id >= 0 && id < static_cast<int>(want.size()));
        EXPECT_NEAR(logprob, want[id], kTolerance) << where << ", position " << i << ", top " << k;
        if (k > 0) EXPECT_LE(logprob, got[i].top[k - 1].second);
      }
      EXPECT_NEAR(got[i].top[0].second, *std::max_element(want.begin(), want.end()), kTolerance)
          << where << ", position " << i;
    }
  }
}

using test::cpu_config;

TEST(PromptLogprobsHf, WholePromptsMatchTransformers) {
  for (const HfPrompts& f : load()) expect_matches_hf(f, cpu_config(), "whole prompts");
}

TEST(PromptLogprobsHf, ChunksAndSlicesMatchTransformers) {
  EngineConfig c = cpu_config();
  c.max_num_batched_tokens = 7;  // prompts of 16..64 tokens in many steps
  c.max_num_seqs = 4;            // their rows' logits read back 4 at a time
  for (const HfPrompts& f : load()) expect_matches_hf(f, c, "chunks of 7");
}

TEST(PromptLogprobsHf, TheFusedPathMatchesTransformers) {
  // Steps of up to 8 tokens through the fused ops (on the CPU only with this switch), whose
  // final rows are not normed until the LM head.
  setenv("KESTREL_FUSED_MAX_ROWS", "8", 1);
  EngineConfig c = cpu_config();
  c.max_num_batched_tokens = 7;
  for (const HfPrompts& f : load()) expect_matches_hf(f, c, "fused, chunks of 7");
  unsetenv("KESTREL_FUSED_MAX_ROWS");
}

}  // namespace
}  // namespace kestrel
