// ToolCallParser (server/tool_calls.h): expected calls and content written by hand from the
// Hermes markup, the text fed whole, cut in two at every position, and byte by byte.
#include "server/tool_calls.h"

#include "server/generation.h"
#include "server/mistral_calls.h"
#include "server/openai_format.h"

#include <gtest/gtest.h>

#include <cctype>
#include <set>
#include <string>
#include <vector>

namespace kestrel::server {
namespace {

struct Case {
  std::string text;
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
};

const std::vector<Case> kCases = {
    {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
     "",
     {{"get_weather", R"({"city":"Paris"})"}}},
    {"Let me check.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\nDone.",
     "Let me check.\n\nDone.",
     {{"f", "{}"}}},
    {"<tool_call>{\"name\": \"a\", \"arguments\": {\"x\": 1}}</tool_call><tool_call>{\"name\": "
     "\"b\", \"arguments\": \"{\\\"y\\\": [2]}\"}</tool_call>",
     "",
     {{"a", R"({"x":1})"}, {"b", R"({"y": [2]})"}}},
    {"<tool_call>not json</tool_call> after", "<tool_call>not json</tool_call> after", {}},
    {"<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>", {}},
    {"<tool_call>{\"name\": \"cut\", \"argum", "<tool_call>{\"name\": \"cut\", \"argum", {}},
    {"no calls, a < b", "no calls, a < b", {}},
    {"<tool_c", "<tool_c", {}},
    {"<tool_call>{\"name\": \"n\"}</tool_call>", "", {{"n", "{}"}}},
};

ToolCallPiece run(const std::vector<std::string>& pieces, const std::string& parser = "hermes") {
  const std::unique_ptr<ToolCallParser> p = make_tool_call_parser(parser);
  ToolCallPiece all;
  auto add = [&](ToolCallPiece got) {
    all.content += got.content;
    for (ToolCall& c : got.calls) all.calls.push_back(std::move(c));
  };
  for (const std::string& piece : pieces) add(p->feed(piece));
  add(p->finish());
  return all;
}

void expect_case(const ToolCallPiece& got, const Case& c, const std::string& how) {
  EXPECT_EQ(got.content, c.content) << how;
  ASSERT_EQ(got.calls.size(), c.calls.size()) << how;
  for (size_t i = 0; i < c.calls.size(); ++i) {
    EXPECT_EQ(got.calls[i].name, c.calls[i].first) << how;
    EXPECT_EQ(got.calls[i].arguments, c.calls[i].second) << how;
  }
}

void expect_cases(const std::vector<Case>& cases, const std::string& parser) {
  for (const Case& c : cases) {
    SCOPED_TRACE(parser + ": " + c.text);
    expect_case(run({c.text}, parser), c, "whole");
    for (size_t cut = 0; cut <= c.text.size(); ++cut) {
      expect_case(run({c.text.substr(0, cut), c.text.substr(cut)}, parser), c,
                  "cut at " + std::to_string(cut));
    }
    std::vector<std::string> bytes;
    for (char ch : c.text) bytes.emplace_back(1, ch);
    expect_case(run(bytes, parser), c, "byte by byte");
  }
}

TEST(ToolCallParser, HermesWholeSplitAnywhereAndByteByByte) { expect_cases(kCases, "hermes"); }

// Llama 3.1's JSON calls: the answer is the call (its <|python_tag|> optional), several
// separated by ";"; anything else is content.
TEST(ToolCallParser, Llama3JsonWholeSplitAnywhereAndByteByByte) {
  const std::vector<Case> cases = {
      {"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
       "",
       {{"get_weather", R"({"city":"Paris"})"}}},
      {"<|python_tag|>{\"name\": \"a\", \"parameters\": {\"s\": \"}{\"}}; {\"name\": \"b\", "
       "\"arguments\": {}}",
       "",
       {{"a", R"({"s":"}{"})"}, {"b", "{}"}}},
      {"  \n{\"name\": \"f\"}", "", {{"f", "{}"}}},
      {"The weather is fine.", "The weather is fine.", {}},
      {"{\"not\": \"a call\"}", "{\"not\": \"a call\"}", {}},
      {"{\"name\": \"cut\", \"param", "{\"name\": \"cut\", \"param", {}},
      {"<|python", "<|python", {}},
  };
  expect_cases(cases, "llama3_json");
}

// Llama 3.2's and 4's Python calls: the answer is a list of calls with keyword arguments
// (between <|python_start|> and <|python_end|> optionally), their Python literals as JSON;
// anything that is not wholly such a list is content.
TEST(ToolCallParser, PythonicWholeSplitAnywhereAndByteByByte) {
  const std::vector<Case> cases = {
      {"[get_weather(city=\"Paris\", unit='celsius')]",
       "",
       {{"get_weather", R"({"city":"Paris","unit":"celsius"})"}}},
      {" [a(x=1, y=-2.5e3, z=True, w=None, v=False), b()] ",
       "",
       {{"a", R"({"x":1,"y":-2500.0,"z":true,"w":null,"v":false})"}, {"b", "{}"}}},
      {"[f(items=[1, (2, 3), {'k': \"v\", \"n\": [ ]}], s='it\\'s \\\"q\\\"\\n\\u00e9',),]",
       "",
       {{"f", R"({"items":[1,[2,3],{"k":"v","n":[]}],"s":"it's \"q\"\né"})"}}},
      {"<|python_start|>[tools.search(q=\"x\")]<|python_end|>", "", {{"tools.search", R"({"q":"x"})"}}},
      {"The weather is fine.", "The weather is fine.", {}},
      {"[1, 2, 3]", "[1, 2, 3]", {}},
      {"[]", "[]", {}},
      {"[f(1)]", "[f(1)]", {}},
      {"[f(x=1, x=2)]", "[f(x=1, x=2)]", {}},
      {"[f(x=undefined)]", "[f(x=undefined)]", {}},
      {"[f(x=1)] and more", "[f(x=1)] and more", {}},
      {"[f(x='unclosed)]", "[f(x='unclosed)]", {}},
      {"[f(x=0x10)]", "[f(x=0x10)]", {}},
      {"<|python", "<|python", {}},
  };
  expect_cases(cases, "pythonic");
}

// Mistral's (mistral_calls.h): [TOOL_CALLS] then a JSON list of calls (v0.3; the tag
// optional at the start of the answer: decoding may drop the special token), or
// [TOOL_CALLS]name[ARGS]{...} per call (v11+, a [CALL_ID] allowed before [ARGS]); text
// before the first tag is content; held calls that do not parse are content, tags and all.
TEST(ToolCallParser, MistralWholeSplitAnywhereAndByteByByte) {
  const std::vector<Case> cases = {
      {"[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
       "",
       {{"get_weather", R"({"city":"Paris"})"}}},
      {" [{\"name\": \"a\", \"arguments\": {\"s\": \"]\"}}, {\"name\": \"b\"}]",
       "",
       {{"a", R"({"s":"]"})"}, {"b", "{}"}}},
      {"The weather is fine.", "The weather is fine.", {}},
      {"[1, 2]", "[1, 2]", {}},
      {"[]", "[]", {}},
      {"[{\"name\": \"cut\", \"argu", "[{\"name\": \"cut\", \"argu", {}},
      {"[TOOL_CALLS]not a list", "[TOOL_CALLS]not a list", {}},
      {"[TOOL_CAL", "[TOOL_CAL", {}},
      {"[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}",
       "",
       {{"get_weather", R"({"city":"Paris"})"}}},
      {"[TOOL_CALLS]a[ARGS]{\"x\": [1, 2]}[TOOL_CALLS]b[ARGS]{}",
       "",
       {{"a", R"({"x":[1,2]})"}, {"b", "{}"}}},
      {"Let me check.[TOOL_CALLS]f[ARGS]{}", "Let me check.", {{"f", "{}"}}},
      {"[TOOL_CALLS]f[CALL_ID]a1b2c3d4e[ARGS]{\"q\": \"[ARGS]\"}", "", {{"f", R"({"q":"[ARGS]"})"}}},
      {"Text then [TOOL_CALLS][{\"name\": \"g\", \"arguments\": {}}]", "Text then ", {{"g", "{}"}}},
      {"[TOOL_CALLS]f[ARGS]{\"x\": ", "[TOOL_CALLS]f[ARGS]{\"x\": ", {}},
      {"[TOOL_CALLS]two words[ARGS]{}", "[TOOL_CALLS]two words[ARGS]{}", {}},
      {"[TOOL_CALLS]f[ARGS][1]", "[TOOL_CALLS]f[ARGS][1]", {}},
      {"[TOOL_CALLS]a[ARGS]{}[TOOL_CALLS]", "[TOOL_CALLS]a[ARGS]{}[TOOL_CALLS]", {}},
      {"so [TOOL_CAL", "so [TOOL_CAL", {}},
      {"brackets [like this] stay", "brackets [like this] stay", {}},
  };
  expect_cases(cases, "mistral");
}

// Mistral's templates take only call ids of nine letters and digits.
TEST(ToolCallParser, MistralCallIdsAreNineLettersOrDigitsAndDistinct) {
  std::set<std::string> seen;
  for (uint64_t n = 0; n < 100000; ++n) {
    const std::string id = mistral_call_id(0x1234abcd5678ef90ull, n);
    ASSERT_EQ(id.size(), 9u) << id;
    for (char c : id) ASSERT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << id;
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 100000u);
  EXPECT_NE(mistral_call_id(1, 0), mistral_call_id(2, 0));
}

TEST(ToolCallParser, ACallComesOutWhenItCloses) {
  const std::unique_ptr<ToolCallParser> p = make_tool_call_parser("hermes");
  EXPECT_TRUE(p->feed("Sure. <tool_call>{\"name\": \"f\", ").calls.empty());
  const ToolCallPiece done = p->feed("\"arguments\": {}}</tool_call>");
  ASSERT_EQ(done.calls.size(), 1u);
  EXPECT_EQ(done.calls[0].name, "f");
}

// OpenAI's shapes: message.tool_calls with ids, content null beside calls; a streamed delta
// carries each call's index in its choice.
TEST(ToolCallFormat, MessagesAndDeltas) {
  ResponseMeta meta;
  meta.chat = true;
  meta.tool_calls = true;
  ChoiceDelta d;
  d.tool_calls = {{"get_weather", R"({"city":"Paris"})"}};
  d.tool_call_ids = {"chatcmpl-tool-1"};
  d.first_tool_call = 2;
  d.finish_reason = "tool_calls";
  const nlohmann::json message = full_response(meta, {d}, {}, {1, 2})["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_null());
  ASSERT_EQ(message["tool_calls"].size(), 1u);
  EXPECT_EQ(message["tool_calls"][0],
            (nlohmann::json{{"id", "chatcmpl-tool-1"},
                            {"type", "function"},
                            {"function", {{"name", "get_weather"}, {"arguments", R"({"city":"Paris"})"}}}}));
  const nlohmann::json chunk = stream_chunk(meta, d)["choices"][0];
  EXPECT_EQ(chunk["delta"]["tool_calls"][0]["index"], 2);
  EXPECT_EQ(chunk["finish_reason"], "tool_calls");
}

}  // namespace
}  // namespace kestrel::server
