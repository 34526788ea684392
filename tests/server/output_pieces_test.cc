// OutputPieces (server/output_pieces.h), the split of a choice's text that every endpoint
// shares: expected pieces written by hand from the parsers' rules (thinking between <think>
// and </think>; Hermes calls; the rest text), the text fed whole and cut in two at every
// position; parallel_tool_calls false keeps the first call. take_into (the chat endpoint's
// form) through the chat format's chunks and whole message.
#include "server/output_pieces.h"

#include <gtest/gtest.h>

#include "server/openai_format.h"

#include <string>
#include <vector>

namespace kestrel::server {
namespace {

using Kind = OutputPiece::Kind;

// The pieces of `parts` fed in order (the last one ends the choice), adjacent pieces of the
// same text kind joined: (kind, text or "name args").
std::vector<std::pair<Kind, std::string>> pieces_of(const std::vector<std::string>& parts,
                                                     bool parallel = true) {
  ServerState state;
  state.config.reasoning_parser = "qwen3";
  state.config.tool_call_parser = "hermes";
  GenerateRequest req;
  req.tools = true;
  req.parallel_tool_calls = parallel;
  OutputPieces split(state, req);
  std::vector<std::pair<Kind, std::string>> out;
  for (size_t i = 0; i < parts.size(); ++i) {
    ChoiceDelta d;
    d.text = parts[i];
    if (i + 1 == parts.size()) d.finish_reason = "stop";
    for (const OutputPiece& p : split.take(d)) {
      const std::string text = p.kind == Kind::kToolCall ? p.call.name + " " + p.call.arguments : p.text;
      if (p.kind != Kind::kToolCall && !out.empty() && out.back().first == p.kind) {
        out.back().second += text;
      } else {
        out.emplace_back(p.kind, text);
      }
    }
  }
  return out;
}

TEST(OutputPieces, ThinkingTextAndCallsInOrderHoweverTheTextIsCut) {
  const std::string text =
      "<think>plan it</think>Hello <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n"
      "</tool_call><tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>";
  const std::vector<std::pair<Kind, std::string>> want = {
      {Kind::kReasoning, "plan it"}, {Kind::kText, "Hello "}, {Kind::kToolCall, "f {\"a\":1}"},
      {Kind::kToolCall, "g {}"}};
  EXPECT_EQ(pieces_of({text}), want);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    EXPECT_EQ(pieces_of({text.substr(0, cut), text.substr(cut)}), want) << "cut at " << cut;
  }
  // parallel_tool_calls false: the first call only.
  EXPECT_EQ(pieces_of({text}, false),
            (std::vector<std::pair<Kind, std::string>>{
                {Kind::kReasoning, "plan it"}, {Kind::kText, "Hello "}, {Kind::kToolCall, "f {\"a\":1}"}}));
  // No thinking, no calls: all text.
  EXPECT_EQ(pieces_of({"just ", "text"}),
            (std::vector<std::pair<Kind, std::string>>{{Kind::kText, "just text"}}));
}

// A chat server with the Hermes parser (and Qwen3's thinking with `reasoning`), a request
// with tools, and the chat format's view of it.
struct ChatSetup {
  ChatSetup(bool reasoning, bool parallel) {
    if (reasoning) state.config.reasoning_parser = "qwen3";
    state.config.tool_call_parser = "hermes";
    req.tools = true;
    req.parallel_tool_calls = parallel;
    meta.chat = true;
    meta.reasoning = reasoning;
    meta.tool_calls = true;
  }
  ServerState state;
  GenerateRequest req;
  ResponseMeta meta;
};

// The chat endpoint's deltas: `parts` fed in order through take_into, each delta formatted as
// a stream chunk; returns the chunks' choice objects.
std::vector<nlohmann::json> chat_chunks(const std::vector<std::string>& parts, bool parallel) {
  const ChatSetup chat(true, parallel);
  OutputPieces split(chat.state, chat.req, false);
  int ids = 0;
  std::vector<nlohmann::json> out;
  for (size_t i = 0; i < parts.size(); ++i) {
    ChoiceDelta d;
    d.text = parts[i];
    if (i + 1 == parts.size()) d.finish_reason = "stop";
    split.take_into(d, [&ids] { return "call-" + std::to_string(ids++); });
    out.push_back(stream_chunk(chat.meta, d)["choices"][0]);
  }
  return out;
}

// Streamed: the thinking as reasoning_content, the text as content, every call numbered from
// the choice's calls so far (index) with its own id, and finish_reason "tool_calls", however
// the text is cut; parallel_tool_calls false (vLLM's maybe_filter_parallel_tool_calls) keeps
// the call of index 0 only.
TEST(OutputPieces, TakeIntoGivesTheChatDeltasFields) {
  const std::string text =
      "<think>plan</think>Hi <tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>"
      "<tool_call>{\"name\": \"b\", \"arguments\": {\"x\": 1}}</tool_call>"
      "<tool_call>{\"name\": \"c\", \"arguments\": {}}</tool_call>";
  std::vector<std::vector<std::string>> splits = {{text}};
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    splits.push_back({text.substr(0, cut), text.substr(cut)});
  }
  std::vector<std::string> bytes;
  for (char ch : text) bytes.emplace_back(1, ch);
  splits.push_back(bytes);
  for (bool parallel : {true, false}) {
    for (const auto& parts : splits) {
      std::string reasoning, content;
      std::vector<nlohmann::json> calls;
      const std::vector<nlohmann::json> chunks = chat_chunks(parts, parallel);
      for (const nlohmann::json& c : chunks) {
        reasoning += c["delta"].value("reasoning_content", "");
        content += c["delta"].value("content", "");
        for (const auto& call : c["delta"].value("tool_calls", nlohmann::json::array())) {
          calls.push_back(call);
        }
      }
      const std::string where = std::to_string(parts.size()) + " parts, parallel " +
                                std::to_string(parallel);
      EXPECT_EQ(reasoning, "plan") << where;
      EXPECT_EQ(content, "Hi ") << where;
      EXPECT_EQ(chunks.back()["finish_reason"], "tool_calls") << where;
      ASSERT_EQ(calls.size(), parallel ? 3u : 1u) << where;
      const std::vector<std::string> names = {"a", "b", "c"};
      for (size_t i = 0; i < calls.size(); ++i) {
        EXPECT_EQ(calls[i]["index"], static_cast<int>(i)) << where;
        EXPECT_EQ(calls[i]["id"], "call-" + std::to_string(i)) << where;
        EXPECT_EQ(calls[i]["function"]["name"], names[i]) << where;
      }
    }
  }
}

// A whole choice (the non-streamed answer: every delta appended, then one take_into): one
// message with the text and the calls; a "length" finish stays; no calls, no "tool_calls".
TEST(OutputPieces, TakeIntoAWholeChoice) {
  const ChatSetup chat(false, false);
  auto whole = [&](const std::string& text, const std::string& finish) {
    OutputPieces split(chat.state, chat.req, false);
    ChoiceDelta d;
    d.text = text;
    d.finish_reason = finish;
    split.take_into(d, [] { return std::string("id-1"); });
    return full_response(chat.meta, {d}, {}, {1, 2})["choices"][0];
  };
  const nlohmann::json two = whole(
      "x<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>"
      "<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>", "stop");
  EXPECT_EQ(two["message"]["content"], "x");
  ASSERT_EQ(two["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(two["message"]["tool_calls"][0]["id"], "id-1");
  EXPECT_EQ(two["message"]["tool_calls"][0]["function"]["name"], "a");
  EXPECT_EQ(two["finish_reason"], "tool_calls");
  const nlohmann::json cut = whole("y <tool_call>{\"name\": \"a\"", "length");
  EXPECT_EQ(cut["finish_reason"], "length");
  EXPECT_EQ(whole("plain", "stop")["finish_reason"], "stop");
  EXPECT_EQ(whole("plain", "stop")["message"]["content"], "plain");
}

}  // namespace
}  // namespace kestrel::server
