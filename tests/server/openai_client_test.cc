// The official openai npm client against `kestrel serve` (tests/server/openai_client.mjs,
// echo_logprobs.mjs, prefix_cache.mjs).
#include "server_harness.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::server_test {
namespace {

using json = nlohmann::json;

TEST(OpenAIClient, CompletionsChatStreamingUsageStopLogprobsErrors) {
  ServerProcess server;
  const NodeResult r = run_node("openai_client.mjs", server.port());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("OK"), std::string::npos) << r.output;
}

// lm-evaluation-harness's loglikelihood requests (echo with logprobs) and vLLM's
// prompt_logprobs, against the prompt logprobs of the offline engine (kestrel::LLM with
// SamplingParams::prompt_logprobs) for the same prompts.
TEST(OpenAIClient, EchoWithLogprobsAndPromptLogprobsMatchTheOfflineEngine) {
  const std::vector<std::string> prompts = {
      "Question: What is the capital of France?\nAnswer: Paris",
      "The quick brown fox jumps over the lazy dog",
  };
  const Tokenizer tokenizer = Tokenizer::from_dir(model_dir());
  json expected = {{"prompts", prompts}, {"ids", json::array()}, {"logprobs", json::array()}};
  {
    LLM llm = offline_llm();
    SamplingParams p = llm.default_sampling_params();
    p.temperature = 0.0f;
    p.max_tokens = 1;
    p.prompt_logprobs = 1;
    for (const std::string& text : prompts) {
      const std::vector<int> ids = tokenizer.encode(text, true);
      const RequestOutput out = llm.generate(std::vector<std::vector<int>>{ids}, p, false).at(0);
      ASSERT_EQ(out.prompt_logprobs.size(), ids.size() - 1) << text;
      json logprobs = json::array();
      for (const TokenLogprobs& lp : out.prompt_logprobs) logprobs.push_back(lp.logprob);
      expected["ids"].push_back(ids);
      expected["logprobs"].push_back(logprobs);
    }
  }
  ServerProcess server;
  const NodeResult r =
      run_node("echo_logprobs.mjs", server.port(), {{"EXPECTED", expected.dump()}});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("OK"), std::string::npos) << r.output;
}

// Prefix-cache hits in usage (prefix_cache.mjs): a long prompt sent twice is cached the
// second time, on completions, chat and responses; with --no-prefix-caching never.
TEST(OpenAIClient, UsageReportsPrefixCacheHits) {
  constexpr int kBlockSize = 16;
  {
    ServerProcess server({"--block-size", std::to_string(kBlockSize)});
    const NodeResult r =
        run_node("prefix_cache.mjs", server.port(), {{"BLOCK_SIZE", std::to_string(kBlockSize)}});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("OK"), std::string::npos) << r.output;
  }
  ServerProcess server({"--block-size", std::to_string(kBlockSize), "--no-prefix-caching"});
  const NodeResult r = run_node("prefix_cache.mjs", server.port(),
                                {{"BLOCK_SIZE", std::to_string(kBlockSize)}, {"CACHING", "0"}});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("OK"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kestrel::server_test
