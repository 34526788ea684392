// Real model chat templates (Qwen3 and Llama 3.1 from the npm tokenizer packages, more from
// tests/data/chat/), rendered with many conversations and compared with Python's jinja2.
#include "jinja_oracle.h"

namespace kestrel::chat_test {
namespace {

std::string fixture(const std::string& name) {
  std::string text = read_file(std::string(KESTREL_SOURCE_DIR) + "/tests/data/chat/" + name);
  EXPECT_FALSE(text.empty()) << "missing fixture tests/data/chat/" << name;
  return text;
}

Json msg(const char* role, Json content) { return {{"role", role}, {"content", std::move(content)}}; }

// A message list (a braced list of one object would otherwise become that object).
Json conv(std::initializer_list<Json> messages) {
  Json out = Json::array();
  for (const Json& m : messages) out.push_back(m);
  return out;
}

Json weather_tool() {
  return {{"type", "function"},
          {"function",
           {{"name", "get_weather"},
            {"description", "Get the current weather in a city — returns °C."},
            {"parameters",
             {{"type", "object"},
              {"properties",
               {{"city", {{"type", "string"}, {"description", "City name, e.g. \"Paris\""}}},
                {"unit", {{"type", "string"}, {"enum", {"celsius", "fahrenheit"}}}}}},
              {"required", {"city"}}}}}}};
}

Json search_tool() {
  return {{"type", "function"},
          {"function", {{"name", "search"}, {"description", "Search the web."},
                        {"parameters", {{"type", "object"}, {"properties", {{"q", {{"type", "string"}}}}}}}}}};
}

Json tool_call(const char* name, Json arguments) {
  return {{"id", "call_1"}, {"type", "function"}, {"function", {{"name", name}, {"arguments", std::move(arguments)}}}};
}

// Conversations every template is rendered with.
std::vector<std::pair<std::string, Json>> conversations() {
  Json tool_turn = msg("assistant", "");
  tool_turn["tool_calls"] = Json::array({tool_call("get_weather", {{"city", "Paris"}, {"unit", "celsius"}})});
  Json string_args_turn = msg("assistant", "Let me check.");
  string_args_turn["tool_calls"] = Json::array({tool_call("get_weather", "{\"city\": \"Oslo\"}"),
                                    tool_call("search", {{"q", "Oslo news"}})});
  Json reasoning_turn = msg("assistant", "The answer is 4.");
  reasoning_turn["reasoning_content"] = "2 + 2 = 4, simple.";
  return {
      {"single user", conv({msg("user", "Hello!")})},
      {"system and user", conv({msg("system", "You are a helpful assistant."), msg("user", "What is 2+2?")})},
      {"multi turn", conv({msg("system", "Be brief."), msg("user", "Hi"), msg("assistant", "Hello! How can I help?"),
                      msg("user", "Tell me a joke.")})},
      {"unicode and whitespace", conv({msg("user", "  Ünïcödé 日本語 😀 \n\n with \"quotes\" and \\backslashes\\  ")})},
      {"inline think", conv({msg("user", "Q1"), msg("assistant", "<think>\nstep one\n</think>\n\nA1"), msg("user", "Q2"),
                        msg("assistant", "<think>reasoning two</think>A2")})},
      {"reasoning_content", conv({msg("user", "What is 2+2?"), reasoning_turn})},
      {"tool call and response", conv({msg("system", "Use tools."), msg("user", "Weather in Paris?"), tool_turn,
                                  msg("tool", "{\"temperature\": 21}"), msg("assistant", "It is 21 °C.")})},
      {"parallel tool calls", conv({msg("user", "Weather and news in Oslo?"), string_args_turn, msg("tool", "cloudy"),
                               msg("tool", "no news"), msg("assistant", "Cloudy, no news.")})},
      {"multi step tool", conv({msg("user", "Start"), tool_turn, msg("tool", "r1"),
                           msg("user", "<tool_response>\nmanual\n</tool_response>"), msg("assistant", "done")})},
      {"ends with tool", conv({msg("user", "Weather?"), tool_turn, msg("tool", "sunny")})},
  };
}

// Renders every conversation with and without a generation prompt and with each `extra`.
void expect_template_matches(const std::string& tmpl, const std::vector<Json>& extras,
                             const std::vector<std::pair<std::string, Json>>& convs) {
  std::vector<Case> cases;
  for (const auto& [conv_name, messages] : convs) {
    for (size_t e = 0; e < extras.size(); ++e) {
      for (bool gen : {false, true}) {
        cases.push_back({conv_name + " / extra " + std::to_string(e) + (gen ? " / gen" : ""), tmpl,
                         make_chat_context(messages, gen, extras[e])});
      }
    }
  }
  expect_same_as_jinja2(cases);
}

TEST(ChatRealTemplates, Qwen3MatchesJinja) {
  std::string tmpl = npm_chat_template("tokenizer-qwen3");
  ASSERT_FALSE(tmpl.empty());
  std::vector<Json> extras = {
      Json::object(),
      {{"enable_thinking", false}},
      {{"enable_thinking", true}},
      {{"tools", Json::array({weather_tool(), search_tool()})}},
      {{"tools", Json::array({weather_tool()})}, {"enable_thinking", false}},
      {{"tools", Json::array()}},
  };
  expect_template_matches(tmpl, extras, conversations());
}

TEST(ChatRealTemplates, Qwen3ContentParts) {
  std::string tmpl = npm_chat_template("tokenizer-qwen3");
  ASSERT_FALSE(tmpl.empty());
  Json parts = {{{"type", "text"}, {"text", "First part."}}, {{"type", "text"}, {"text", "Second part."}}};
  Json with_parts = {msg("system", "Sys"), msg("user", parts)};
  Json assistant_parts = {msg("user", "Hi"), msg("assistant", parts)};
  std::vector<Case> cases = {
      // Qwen3's template calls string methods on the content: jinja2 raises for a list, so must we.
      {"raw parts user", tmpl, make_chat_context(with_parts, true, Json::object())},
      {"raw parts assistant", tmpl, make_chat_context(assistant_parts, false, Json::object())},
      // Flattened the way vLLM does, the parts render as one string.
      {"flattened parts", tmpl, make_chat_context(flatten_text_content(with_parts), true, Json::object())},
      {"flattened assistant", tmpl, make_chat_context(flatten_text_content(assistant_parts), false, Json::object())},
  };
  expect_same_as_jinja2(cases);
}

TEST(ChatRealTemplates, Llama31NpmMatchesJinja) {
  std::string tmpl = npm_chat_template("tokenizer-llama3_1");
  ASSERT_FALSE(tmpl.empty());
  std::vector<Json> extras = {
      {{"bos_token", "<|begin_of_text|>"}},
      {{"bos_token", "<|begin_of_text|>"}, {"tools", Json::array({weather_tool()})}, {"date_string", "01 Jan 2025"}},
  };
  expect_template_matches(tmpl, extras, conversations());
}

TEST(ChatRealTemplates, Llama31WithToolsMatchesJinja) {
  std::string tmpl = fixture("llama3_1_tools.jinja");
  Json tool_turn = msg("assistant", nullptr);
  tool_turn["tool_calls"] = Json::array({tool_call("get_weather", {{"city", "Paris"}})});
  Json builtin_turn = msg("assistant", nullptr);
  builtin_turn["tool_calls"] = Json::array({tool_call("brave_search", {{"query", "kestrel"}})});
  Json two_calls = msg("assistant", nullptr);
  two_calls["tool_calls"] = Json::array({tool_call("a", Json::object()), tool_call("b", Json::object())});
  std::vector<std::pair<std::string, Json>> convs = {
      {"plain", conv({msg("user", "Hello")})},
      {"system", conv({msg("system", "  You are Llama.  "), msg("user", "Hi"), msg("assistant", "Hello"), msg("user", "Bye")})},
      {"tool call", conv({msg("system", "Sys"), msg("user", "Weather?"), tool_turn, msg("tool", "{\"temp\": 20}"),
                     msg("assistant", "20 degrees")})},
      {"tool result object", conv({msg("user", "Weather?"), tool_turn, msg("ipython", {{"temp", 20}})})},
      {"builtin tool", conv({msg("user", "Search"), builtin_turn, msg("ipython", "results")})},
      {"two tool calls raise", conv({msg("user", "x"), two_calls})},
      {"no user message with tools", conv({msg("system", "only system")})},
  };
  std::vector<Json> extras = {
      {{"bos_token", "<|begin_of_text|>"}},
      {{"bos_token", "<|begin_of_text|>"}, {"date_string", "01 Jan 2025"}},
      {{"bos_token", "<|begin_of_text|>"}, {"tools", Json::array({weather_tool(), search_tool()})}},
      {{"bos_token", "<|begin_of_text|>"}, {"tools", Json::array({weather_tool()})}, {"tools_in_user_message", false},
       {"date_string", "15 Mar 2025"}},
      {{"bos_token", "<|begin_of_text|>"}, {"builtin_tools", Json::array({"brave_search", "code_interpreter"})}},
      {{"bos_token", "<|begin_of_text|>"}, {"custom_tools", Json::array({search_tool()})}},
  };
  expect_template_matches(tmpl, extras, convs);
}

TEST(ChatRealTemplates, OtherFamiliesMatchJinja) {
  Json image_parts = {{{"type", "image"}}, {{"type", "text"}, {"text", "  What is in the image?  "}}};
  Json sys_parts = {{{"type", "text"}, {"text", "System as parts"}}};
  std::vector<std::pair<std::string, Json>> alternating = {
      {"plain", conv({msg("user", "Hi"), msg("assistant", "Hello"), msg("user", "Bye")})},
      {"system", conv({msg("system", "Be nice."), msg("user", "Hi")})},
      {"system parts and image", conv({msg("system", sys_parts), msg("user", image_parts)})},
      {"not alternating", conv({msg("user", "a"), msg("user", "b")})},
      {"bad content", conv({msg("user", 5)})},
  };
  Json special = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  expect_template_matches(fixture("gemma3.jinja"), {special}, alternating);
  expect_template_matches(fixture("llama2.jinja"), {special}, alternating);

  Json calls = msg("assistant", nullptr);
  calls["tool_calls"] = Json::array({tool_call("get_weather", "{\"city\": \"Paris\"}"), tool_call("search", "{\"q\": \"x\"}")});
  std::vector<std::pair<std::string, Json>> deepseek = {
      {"plain", conv({msg("system", "Sys"), msg("user", "Hi"), msg("assistant", "<think>hmm</think>Hello")})},
      {"tools", conv({msg("user", "Weather?"), calls, msg("tool", "sunny"), msg("tool", "found"), msg("assistant", "Sunny.")})},
  };
  expect_template_matches(fixture("deepseek_r1_distill.jinja"), {{{"bos_token", "<｜begin▁of▁sentence｜>"}}}, deepseek);
}

}  // namespace
}  // namespace kestrel::chat_test
