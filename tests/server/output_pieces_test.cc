// OutputPieces (server/output_pieces.h), the split of a choice's text that the Responses and
// Messages APIs share: expected pieces written by hand from the parsers' rules (thinking
// between <think> and </think>; Hermes calls; the rest text), the text fed whole and cut in
// two at every position; parallel_tool_calls false keeps the first call.
#include "server/output_pieces.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kestrel::server
