// ReasoningSplitter (server/reasoning.h): expected pieces written by hand from the rule
// (between <think> and </think>: reasoning; elsewhere: content; tags dropped), fed whole and
// in every split into two and into single bytes.
#include "server/reasoning.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/openai_format.h"

namespace kestrel::server {
namespace {

struct Case {
  std::string text, reasoning, content;
};

const std::vector<Case> kCases = {
    {"<think>\nLet me add 2 and 2.\n</think>\n\nIt is 4.", "\nLet me add 2 and 2.\n", "\n\nIt is 4."},
    {"No thinking here.", "", "No thinking here."},
    {"<think></think>Answer", "", "Answer"},
    {"<think>cut off before the end", "cut off before the end", ""},  // max_tokens inside
    {"a < b and </think> alone", "", "a < b and </think> alone"},      // no <think>: content
    {"pre<think>mid</think>post<think>again", "mid", "prepost<think>again"},
    {"<thin", "", "<thin"},  // a partial tag at the end is text after all
    {"<think>x</thi", "x</thi", ""},
};

ReasoningPiece run(const std::vector<std::string>& pieces) {
  ReasoningSplitter s;
  ReasoningPiece all;
  for (const std::string& p : pieces) {
    ReasoningPiece got = s.feed(p);
    all.reasoning += got.reasoning;
    all.content += got.content;
  }
  ReasoningPiece rest = s.finish();
  all.reasoning += rest.reasoning;
  all.content += rest.content;
  return all;
}

TEST(ReasoningSplitter, WholeAndSplitAnywhere) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.text);
    ReasoningPiece whole = run({c.text});
    EXPECT_EQ(whole.reasoning, c.reasoning);
    EXPECT_EQ(whole.content, c.content);
    for (size_t cut = 0; cut <= c.text.size(); ++cut) {
      ReasoningPiece two = run({c.text.substr(0, cut), c.text.substr(cut)});
      EXPECT_EQ(two.reasoning, c.reasoning) << "cut at " << cut;
      EXPECT_EQ(two.content, c.content) << "cut at " << cut;
    }
    std::vector<std::string> bytes;
    for (char ch : c.text) bytes.emplace_back(1, ch);
    ReasoningPiece one = run(bytes);
    EXPECT_EQ(one.reasoning, c.reasoning);
    EXPECT_EQ(one.content, c.content);
  }
}

TEST(ReasoningSplitter, NothingIsHeldBackThatCannotBeATag) {
  ReasoningSplitter s;
  EXPECT_EQ(s.feed("<think>abc").reasoning, "abc");
  const ReasoningPiece held = s.feed("def</th");
  EXPECT_EQ(held.reasoning, "def");  // "</th" may start </think>
  const ReasoningPiece after = s.feed("ink>Hi");
  EXPECT_EQ(after.reasoning, "");
  EXPECT_EQ(after.content, "Hi");
}

// A prompt that left <think> open: the output starts as reasoning, up to </think>.
TEST(ReasoningSplitter, OutputOfAPromptThatOpenedThinking) {
  ReasoningSplitter s(/*thinking=*/true);
  const ReasoningPiece a = s.take("still thinking</think>\n\nAnswer", /*last=*/true);
  EXPECT_EQ(a.reasoning, "still thinking");
  EXPECT_EQ(a.content, "\n\nAnswer");
  ReasoningSplitter cut(true);
  EXPECT_EQ(cut.take("cut off", true).reasoning, "cut off");
}

TEST(ReasoningPrompt, OpensThinkingWhenItsLastTagIsAnOpenOne) {
  EXPECT_FALSE(prompt_opens_thinking("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
  // Qwen3 with enable_thinking false: an empty think block, closed.
  EXPECT_FALSE(prompt_opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  // DeepSeek-R1's template, or continue_final_message inside the thinking.
  EXPECT_TRUE(prompt_opens_thinking("<|im_start|>assistant\n<think>\n"));
  EXPECT_TRUE(prompt_opens_thinking("<think>a</think>b<|im_start|>assistant\n<think>\nso far"));
  EXPECT_FALSE(prompt_opens_thinking("</think>"));
}

// The OpenAI shapes: reasoning_content beside content (vLLM's field), null where absent.
TEST(ReasoningFormat, ChunksAndMessages) {
  ResponseMeta meta;
  meta.chat = true;
  meta.reasoning = true;
  ChoiceDelta d;
  d.reasoning = "thinking";
  EXPECT_EQ(stream_chunk(meta, d)["choices"][0]["delta"], (nlohmann::json{{"reasoning_content", "thinking"}}));
  d.text = "answer";
  const nlohmann::json message = full_response(meta, {d}, {}, {1, 2})["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "thinking");
  EXPECT_EQ(message["content"], "answer");
  ChoiceDelta plain;
  plain.text = "just text";
  const nlohmann::json m2 = full_response(meta, {plain}, {}, {1, 2})["choices"][0]["message"];
  EXPECT_TRUE(m2["reasoning_content"].is_null());
  meta.reasoning = false;
  EXPECT_FALSE(full_response(meta, {plain}, {}, {1, 2})["choices"][0]["message"].contains("reasoning_content"));
}

}  // namespace
}  // namespace kestrel::server
