// Structured outputs through the offline LLM on the CPU backend: a regex constraint on a
// random-weight model with the real Qwen3 tokenizer. Every sample fullmatches in Python's
// re, ends by EOS where the pattern is complete, and the tokens are the same with async
// scheduling on and off (the runner's sampling of a constrained step waits for the step
// before to settle while its forward overlaps: ModelExecutor::launch_sampling).
#include <gtest/gtest.h>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "kestrel/llm.h"
#include "structured/grammar_compiler.h"
#include "text_model.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

constexpr const char* kPattern = "(red|green|blue)-[0-9]{2,4}( [a-z]{1,5}){0,3}";

std::vector<RequestOutput> run(bool async_scheduling, LLMStats* stats) {
  EngineConfig c = config();
  c.async_scheduling = async_scheduling;
  LLM llm(tiny_model_dir(), c);
  structured::GrammarCompiler compiler(std::make_shared<const structured::VocabTrie>(
      structured::VocabTrie::from_tokenizer(*llm.tokenizer(), llm.vocab_size())));
  structured::StructuredOutputSpec spec;
  spec.kind = structured::StructuredOutputSpec::Kind::kRegex;
  spec.regex = kPattern;
  SamplingParams p;
  p.temperature = 1.0f;
  p.max_tokens = 64;
  p.n = 2;
  p.constraint = compiler.compile(spec);
  std::vector<SamplingParams> params;
  std::vector<std::vector<int>> prompts;
  for (int i = 0; i < 6; ++i) {
    p.seed = 100 + i;
    params.push_back(p);
    prompts.push_back(llm.tokenizer()->encode("Color code number " + std::to_string(i), false));
  }
  SamplingParams plain;  // an unconstrained request in the same batches
  plain.seed = 1;
  plain.max_tokens = 40;
  plain.ignore_eos = true;
  params.push_back(plain);
  prompts.push_back(llm.tokenizer()->encode("Free text", false));
  std::vector<RequestOutput> out = llm.generate(prompts, params, false);
  *stats = llm.stats();
  return out;
}

std::vector<bool> python_fullmatch(const std::vector<std::string>& texts) {
  const std::string path = std::string(KESTREL_BINARY_DIR) + "/structured_test_texts.json";
  FILE* f = std::fopen(path.c_str(), "w");
  const std::string data = nlohmann::json{{"pattern", kPattern}, {"texts", texts}}.dump();
  std::fwrite(data.data(), 1, data.size(), f);
  std::fclose(f);
  const std::string cmd = "python3 -c \"import json, re, sys; d = json.load(open(sys.argv[1])); "
                          "print(json.dumps([re.fullmatch(d['pattern'], t) is not None for t in d['texts']]))\" " + path;
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  EXPECT_EQ(pclose(p), 0) << out;
  return nlohmann::json::parse(out).get<std::vector<bool>>();
}

TEST(StructuredLLM, RegexSamplesMatchAndOverlapChangesNothing) {
  LLMStats overlapped_stats, sync_stats;
  const std::vector<RequestOutput> overlapped = run(true, &overlapped_stats);
  const std::vector<RequestOutput> sync = run(false, &sync_stats);
  EXPECT_EQ(sync_stats.num_overlapped_steps, 0);
  // Constrained steps overlap too (all but the first and the last few).
  EXPECT_GE(overlapped_stats.num_overlapped_steps, overlapped_stats.num_steps / 2)
      << overlapped_stats.num_steps << " steps";
  ASSERT_EQ(overlapped.size(), 7u);
  std::vector<std::string> texts;
  for (size_t i = 0; i + 1 < overlapped.size(); ++i) {
    for (size_t s = 0; s < 2; ++s) {
      const CompletionOutput& c = overlapped[i].outputs.at(s);
      EXPECT_EQ(c.finish_reason, "stop") << c.text;
      EXPECT_EQ(c.token_ids, sync[i].outputs.at(s).token_ids) << "request " << i << " sample " << s;
      texts.push_back(c.text);
    }
  }
  EXPECT_EQ(overlapped.back().outputs[0].token_ids, sync.back().outputs[0].token_ids);
  EXPECT_EQ(overlapped.back().outputs[0].token_ids.size(), 40u);
  const std::vector<bool> ok = python_fullmatch(texts);
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_TRUE(ok[i]) << texts[i];
}

}  // namespace
}  // namespace kestrel
