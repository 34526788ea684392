// The public API: error locations, raise_exception, context building, content flattening,
// JSON conversion and concurrent rendering. Expected values are derived by hand here, or come
// from jinja2 where noted.
#include <thread>

#include "chat/value.h"
#include "jinja_oracle.h"

namespace kestrel::chat_test {
namespace {

TemplateError render_error(const std::string& tmpl, const Json& context = Json::object()) {
  try {
    ChatTemplate::parse(tmpl).render(context);
  } catch (const TemplateError& e) {
    return e;
  }
  ADD_FAILURE() << "expected a TemplateError from: " << tmpl;
  return TemplateError("", 0, 0, false);
}

TEST(ChatApi, SyntaxErrorNamesLineAndColumn) {
  TemplateError e = render_error("line one\n{{ 1 + }}");
  EXPECT_EQ(e.line(), 2);
  EXPECT_EQ(e.column(), 8);  // the `}}` where an operand was expected
  EXPECT_FALSE(e.raised_by_template());
  EXPECT_NE(std::string(e.what()).find("line 2, column 8"), std::string::npos) << e.what();

  TemplateError unclosed = render_error("a\n\n  {% if x %}\nno end");
  EXPECT_EQ(unclosed.line(), 4);
  EXPECT_NE(unclosed.message().find("endif"), std::string::npos) << unclosed.message();

  TemplateError filter = render_error("{{ x | nosuchfilter }}");
  EXPECT_EQ(filter.column(), 8);
  EXPECT_NE(filter.message().find("nosuchfilter"), std::string::npos);
}

TEST(ChatApi, RenderErrorNamesInnermostExpression) {
  // x.y is undefined (printing it would give ""), and taking .z of it fails at the second dot.
  TemplateError e = render_error("a\nb {{ x.y.z }}", {{"x", Json::object()}});
  EXPECT_EQ(e.line(), 2);
  EXPECT_EQ(e.column(), 9);
  EXPECT_EQ(e.message(), "'dict object' has no attribute 'y'");

  TemplateError type = render_error("{% for m in messages %}\n  {{ m + 1 }}{% endfor %}", {{"messages", Json::array({"s"})}});
  EXPECT_EQ(type.line(), 2);
  EXPECT_EQ(type.message(), "can only concatenate str (not \"int\") to str");
}

TEST(ChatApi, RaiseExceptionCarriesTemplateMessage) {
  TemplateError e = render_error("ok\n{% if messages|length > 1 %}{{ raise_exception('Only one message, please') }}{% endif %}",
                                 {{"messages", {1, 2}}});
  EXPECT_TRUE(e.raised_by_template());
  EXPECT_EQ(e.message(), "Only one message, please");
  EXPECT_EQ(e.line(), 2);
  EXPECT_NE(std::string(e.what()).find("Only one message, please"), std::string::npos);
}

TEST(ChatApi, MakeChatContextFollowsTransformers) {
  Json messages = {{{"role", "user"}, {"content", "hi"}}};
  Json plain = make_chat_context(messages, true, Json::object());
  EXPECT_EQ(plain.dump(), R"({"messages":[{"role":"user","content":"hi"}],"tools":null,"documents":null,"add_generation_prompt":true})");

  Json extra = {{"enable_thinking", false}, {"tools", Json::array({{{"name", "t"}}})}, {"bos_token", "<s>"}};
  Json with_tools = make_chat_context(messages, false, extra);
  EXPECT_EQ(with_tools.dump(),
            R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"t"}],"documents":null,)"
            R"("add_generation_prompt":false,"enable_thinking":false,"bos_token":"<s>"})");

  EXPECT_THROW(make_chat_context(Json::object(), true, Json::object()), Error);
  EXPECT_THROW(make_chat_context(messages, true, Json::array()), Error);
}

TEST(ChatApi, ApplyChatTemplateRendersMessages) {
  std::string tmpl =
      "{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}"
      "{% if add_generation_prompt %}A:{% endif %}{{ tools is none }}|{{ bos_token }}";
  Json messages = {{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", "yo"}}};
  EXPECT_EQ(apply_chat_template(tmpl, messages, true, {{"bos_token", "<s>"}}), "user:hi;assistant:yo;A:True|<s>");
  EXPECT_EQ(apply_chat_template(tmpl, messages, false), "user:hi;assistant:yo;True|");
}

TEST(ChatApi, FlattenTextContentJoinsParts) {
  Json messages = {
      {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}},
      {{"role", "assistant"}, {"content", "plain"}},
      {{"role", "tool"}, {"content", nullptr}},
  };
  Json flat = flatten_text_content(messages);
  EXPECT_EQ(flat[0]["content"], "a\nb");
  EXPECT_EQ(flat[1]["content"], "plain");
  EXPECT_TRUE(flat[2]["content"].is_null());

  Json image = {{{"role", "user"}, {"content", {{{"type", "image_url"}, {"image_url", "x"}}}}}};
  EXPECT_THROW(flatten_text_content(image), Error);
  // A "type" that is not a string is not a text part (an Error, not nlohmann's type_error,
  // which the server answered with a 500).
  for (const Json& type : {Json(5), Json(false), Json::array(), Json::object(), Json(nullptr)}) {
    Json odd = {{{"role", "user"}, {"content", {{{"type", type}, {"text", "x"}}}}}};
    EXPECT_THROW(flatten_text_content(odd), Error) << type.dump();
  }
}

TEST(ChatApi, JsonRoundTripKeepsOrderAndTypes) {
  Json in = Json::parse(R"({"z": 1, "a": [true, null, 2.5, "s", {"y": {}, "b": []}], "m": -7})");
  chat::Value v = chat::Value::from_json(in);
  EXPECT_EQ(v.to_json().dump(), in.dump());
  EXPECT_THROW(chat::Value::from_json(Json::parse("18446744073709551615")), Error);
}

TEST(ChatApi, ConcurrentRendersMatchJinja) {
  std::string tmpl = npm_chat_template("tokenizer-qwen3");
  ASSERT_FALSE(tmpl.empty());
  Json messages = Json::array();
  messages.push_back({{"role", "system"}, {"content", "You are helpful."}});
  for (int i = 0; i < 10; ++i) {
    messages.push_back({{"role", "user"}, {"content", "question " + std::to_string(i)}});
    messages.push_back({{"role", "assistant"}, {"content", "<think>t" + std::to_string(i) + "</think>answer"}});
  }
  Json context = make_chat_context(messages, true, {{"enable_thinking", false}});
  std::vector<OracleResult> expected = render_with_jinja2({{"qwen3", tmpl, context}});
  ASSERT_EQ(expected.size(), 1u);
  ASSERT_TRUE(expected[0].ok) << expected[0].output;

  ChatTemplate parsed = ChatTemplate::parse(tmpl);
  constexpr int kThreads = 8, kRenders = 25;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRenders; ++i) mismatches[t] += parsed.render(context) != expected[0].output;
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

TEST(ChatApi, StrftimeNowMatchesPython) {
  std::string tmpl = "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%A %H') }}";
  // Render before and after Python so a clock tick between them cannot fail the test.
  std::string before = ChatTemplate::parse(tmpl).render(Json::object());
  std::vector<OracleResult> python = render_with_jinja2({{"strftime", tmpl}});
  std::string after = ChatTemplate::parse(tmpl).render(Json::object());
  ASSERT_EQ(python.size(), 1u);
  EXPECT_TRUE(python[0].output == before || python[0].output == after)
      << "python: " << python[0].output << " kestrel: " << before;
}

}  // namespace
}  // namespace kestrel::chat_test
