// The Messages API request without a server: each accepted form becomes the chat body of
// the equivalent chat request, and each rejected field is a 400 naming it.
#include "server/messages_request.h"

#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/messages_format.h"

namespace kestrel::server {
namespace {

using ojson = nlohmann::ordered_json;

ojson chat_of(const char* body) { return messages_to_chat_body(ojson::parse(body)); }

void expect_400(const char* body, const std::string& param, const std::string& part) {
  try {
    messages_to_chat_body(ojson::parse(body));
    ADD_FAILURE() << "accepted; expected a 400 naming " << param << ": " << body;
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << e.what();
    EXPECT_EQ(e.param(), param) << e.what() << " for " << body;
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(MessagesRequest, SystemMessagesAndLimitsMapOntoTheChatFields) {
  EXPECT_EQ(chat_of(R"({"model": "m", "max_tokens": 9, "temperature": 0.5, "top_p": 0.9,
      "top_k": 5, "stream": true, "stop_sequences": ["END"], "metadata": {"user_id": "u"},
      "system": [{"type": "text", "text": "S1"}, {"type": "text", "text": "S2",
                 "cache_control": {"type": "ephemeral"}}],
      "messages": [{"role": "user", "content": "Hi"},
                   {"role": "assistant", "content": "Hello"},
                   {"role": "user", "content": [{"type": "text", "text": "a"},
                                                {"type": "text", "text": "b"}]}]})"),
            ojson::parse(R"({"model": "m", "temperature": 0.5, "top_p": 0.9, "top_k": 5,
      "max_tokens": 9, "stream": true,
      "messages": [{"role": "system", "content": "S1\nS2"},
                   {"role": "user", "content": "Hi"},
                   {"role": "assistant", "content": "Hello"},
                   {"role": "user", "content": [{"type": "text", "text": "a"},
                                                {"type": "text", "text": "b"}]}],
      "stop": ["END"]})"));
}

// tool_use blocks are an assistant message's tool_calls, its thinking the reasoning_content;
// a user turn's tool_result blocks are tool messages, before its text.
TEST(MessagesRequest, ToolUseAndToolResultAreToolCallsAndToolMessages) {
  const ojson chat = chat_of(R"({"max_tokens": 5, "messages": [
      {"role": "user", "content": "Weather in Paris and Rome?"},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Two cities.", "signature": "s"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
        {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true,
         "content": [{"type": "text", "text": "rain"}, {"type": "text", "text": "later"}]},
        {"type": "text", "text": "And?"}]}],
      "tools": [{"name": "weather", "description": "d", "input_schema": {"type": "object"}}],
      "tool_choice": {"type": "tool", "name": "weather", "disable_parallel_tool_use": true},
      "thinking": {"type": "enabled", "budget_tokens": 1024}})");
  EXPECT_EQ(chat["messages"], ojson::parse(R"([
      {"role": "user", "content": "Weather in Paris and Rome?"},
      {"role": "assistant", "content": "Checking.", "reasoning_content": "Two cities.",
       "tool_calls": [
         {"id": "toolu_1", "type": "function",
          "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}},
         {"id": "toolu_2", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
      {"role": "tool", "tool_call_id": "toolu_2", "content": "rain\nlater"},
      {"role": "user", "content": [{"type": "text", "text": "And?"}]}])"));
  EXPECT_EQ(chat["tools"], ojson::parse(R"([{"type": "function", "function": {"name": "weather",
      "description": "d", "parameters": {"type": "object"}}}])"));
  EXPECT_EQ(chat["tool_choice"], ojson::parse(R"({"type": "function", "function": {"name": "weather"}})"));
  EXPECT_EQ(chat["parallel_tool_calls"], false);
  EXPECT_EQ(chat["chat_template_kwargs"], ojson::parse(R"({"enable_thinking": true})"));
  EXPECT_EQ(chat_of(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
      "tools": [], "tool_choice": {"type": "any"}, "thinking": {"type": "disabled"}})")["tool_choice"],
            "required");
  EXPECT_EQ(chat_of(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
      "tool_choice": {"type": "none"}})")["tool_choice"],
            "none");
  // vLLM's extensions pass through; thinking joins the template's other arguments.
  const ojson extended = chat_of(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
      "seed": 7, "min_p": 0.1, "repetition_penalty": 1.1, "chat_template_kwargs": {"a": 1},
      "thinking": {"type": "disabled"}})");
  EXPECT_EQ(extended["seed"], 7);
  EXPECT_EQ(extended["min_p"], 0.1);
  EXPECT_EQ(extended["repetition_penalty"], 1.1);
  EXPECT_EQ(extended["chat_template_kwargs"], ojson::parse(R"({"a": 1, "enable_thinking": false})"));
}

TEST(MessagesRequest, BadOrUnsupportedFieldsAreA400NamingThem) {
  expect_400(R"({"messages": [{"role": "user", "content": "x"}]})", "max_tokens", "required");
  expect_400(R"({"max_tokens": 0, "messages": [{"role": "user", "content": "x"}]})", "max_tokens", ">= 1");
  expect_400(R"({"max_tokens": 5})", "messages", "required");
  expect_400(R"({"max_tokens": 5, "messages": []})", "messages", "empty");
  expect_400(R"({"max_tokens": 5, "messages": [{"role": "system", "content": "x"}]})", "messages",
             "'user' or 'assistant'");
  expect_400(R"({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image",
      "source": {}}]}]})", "messages", "not supported");
  expect_400(R"({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_use",
      "id": "a", "name": "b", "input": {}}]}]})", "messages", "'text' or 'tool_result'");
  expect_400(R"({"max_tokens": 5, "messages": [{"role": "assistant", "content": [{"type": "tool_use",
      "id": "a", "name": "b", "input": [1]}]}]})", "messages", "must be an object");
  expect_400(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "web_search_20250305", "name": "web_search"}]})", "tools", "custom");
  expect_400(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
      "tools": [{"name": "f"}]})", "tools", "input_schema");
  expect_400(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
      "tool_choice": {"type": "required"}})", "tool_choice", "'auto', 'any', 'tool' or 'none'");
  expect_400(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
      "thinking": {"type": "sometimes"}})", "thinking", "'enabled' or 'disabled'");
  expect_400(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
      "stop_sequences": "END"})", "stop_sequences", "list of strings");
  expect_400(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
      "mcp_servers": []})", "mcp_servers", "not supported");
  expect_400(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "n": 2})", "n", "");
}

// The builder: blocks open and close as the kinds of pieces change, the stream's deltas add
// up to the message, and stop_reason follows the end.
TEST(MessageBuilder, BlocksEventsAndStopReasons) {
  int ids = 0;
  MessageBuilder b("msg_1", "m", [&ids](const char* prefix) { return prefix + std::to_string(++ids); });
  std::vector<ojson> events = b.start(7);
  auto add = [&events](std::vector<ojson> more) {
    for (ojson& e : more) events.push_back(std::move(e));
  };
  add(b.add_thinking("Hm"));
  add(b.add_thinking("m."));
  add(b.add_text("Hi"));
  add(b.add_text(""));
  add(b.add_tool_use({"f", R"({"a": 1})"}));
  MessageUsage usage;
  usage.input_tokens = 7;
  usage.cached_tokens = 3;
  usage.output_tokens = 9;
  add(b.finish("stop", nullptr, {}, usage));
  std::vector<std::string> types;
  for (const ojson& e : events) types.push_back(e["type"]);
  EXPECT_EQ(types, (std::vector<std::string>{
                       "message_start", "content_block_start", "content_block_delta",
                       "content_block_delta", "content_block_stop", "content_block_start",
                       "content_block_delta", "content_block_stop", "content_block_start",
                       "content_block_delta", "content_block_stop", "message_delta", "message_stop"}));
  EXPECT_EQ(b.message(), ojson::parse(R"({"id": "msg_1", "type": "message", "role": "assistant",
      "model": "m", "content": [{"type": "thinking", "thinking": "Hmm.", "signature": ""},
                                {"type": "text", "text": "Hi"},
                                {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}],
      "stop_reason": "tool_use", "stop_sequence": null,
      "usage": {"input_tokens": 4, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 3,
                "output_tokens": 9}})"));
  EXPECT_EQ(events[9]["delta"], ojson::parse(R"({"type": "input_json_delta", "partial_json": "{\"a\":1}"})"));

  MessageBuilder s("msg_2", "m", [](const char*) { return std::string("x"); });
  (void)s.add_text("a END");
  (void)s.finish("stop", "END", {"END"}, {});
  EXPECT_EQ(s.message()["stop_reason"], "stop_sequence");
  EXPECT_EQ(s.message()["stop_sequence"], "END");
  MessageBuilder l("msg_3", "m", [](const char*) { return std::string("x"); });
  (void)l.finish("length", nullptr, {}, {});
  EXPECT_EQ(l.message()["stop_reason"], "max_tokens");
  MessageBuilder e("msg_4", "m", [](const char*) { return std::string("x"); });
  (void)e.finish("stop", 151645, {"END"}, {});  // a stop token: the turn's end
  EXPECT_EQ(e.message()["stop_reason"], "end_turn");
}

TEST(MessageBuilder, ErrorsTakeAnthropicsShapeAndType) {
  EXPECT_EQ(anthropic_error_body(400, "bad"), ojson::parse(R"({"type": "error",
      "error": {"type": "invalid_request_error", "message": "bad"}})"));
  EXPECT_EQ(anthropic_error_body(401, "x")["error"]["type"], "authentication_error");
  EXPECT_EQ(anthropic_error_body(404, "x")["error"]["type"], "not_found_error");
  EXPECT_EQ(anthropic_error_body(413, "x")["error"]["type"], "request_too_large");
  EXPECT_EQ(anthropic_error_body(500, "x")["error"]["type"], "api_error");
  EXPECT_EQ(anthropic_error_body(503, "x")["error"]["type"], "overloaded_error");
}

}  // namespace
}  // namespace kestrel::server
