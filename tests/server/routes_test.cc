// The small routes clients and tooling rely on (vLLM's and OpenAI's): one model by id,
// /version, /tokenize and /detokenize, 405 for a wrong method, x-request-id echoed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "kestrel/version.h"
#include "server_harness.h"

namespace kestrel::server_test {
namespace {

using json = nlohmann::json;

json post_json(int port, const std::string& path, const json& body, int want_status = 200) {
  auto res = client(port).Post(path, body.dump(), "application/json");
  if (!res) throw std::runtime_error("no response from " + path);
  EXPECT_EQ(res->status, want_status) << path << ": " << res->body;
  return json::parse(res->body);
}

TEST(Routes, ModelsVersionMethodsAndRequestIds) {
  ServerProcess server;
  auto c = client(server.port());
  auto one = c.Get("/v1/models/" + kModelName);
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 200) << one->body;
  EXPECT_EQ(json::parse(one->body)["id"], kModelName);
  auto other = c.Get("/v1/models/gpt-4");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  EXPECT_EQ(json::parse(other->body)["error"]["code"], "model_not_found");

  auto version = c.Get("/version");
  ASSERT_TRUE(version);
  EXPECT_EQ(json::parse(version->body)["version"], kVersion);

  auto wrong = c.Get("/v1/completions");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 405);
  EXPECT_EQ(wrong->get_header_value("Allow"), "POST");
  EXPECT_TRUE(json::parse(wrong->body).contains("error"));
  auto missing = c.Get("/v1/nothing-here");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);

  auto tagged = c.Get("/health", {{"x-request-id", "trace-42"}});
  ASSERT_TRUE(tagged);
  EXPECT_EQ(tagged->get_header_value("x-request-id"), "trace-42");
}

// CORS, when asked for: allowed origins get the headers and their preflight is answered
// without the API key; other origins get none.
TEST(Routes, CorsForAllowedOriginsOnly) {
  ServerProcess server({"--allowed-origins", "https://app.example,https://b.example"});
  httplib::Client c("127.0.0.1", server.port());  // no API key
  auto preflight = c.Options("/v1/chat/completions",
                             {{"Origin", "https://app.example"},
                              {"Access-Control-Request-Method", "POST"},
                              {"Access-Control-Request-Headers", "authorization, content-type"}});
  ASSERT_TRUE(preflight);
  EXPECT_EQ(preflight->status, 204);
  EXPECT_EQ(preflight->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
  EXPECT_EQ(preflight->get_header_value("Access-Control-Allow-Headers"), "authorization, content-type");
  auto models = client(server.port()).Get("/v1/models", {{"Origin", "https://b.example"}});
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  EXPECT_EQ(models->get_header_value("Access-Control-Allow-Origin"), "https://b.example");
  auto stranger = client(server.port()).Get("/v1/models", {{"Origin", "https://evil.example"}});
  ASSERT_TRUE(stranger);
  EXPECT_FALSE(stranger->has_header("Access-Control-Allow-Origin"));
}

// --reasoning-parser qwen3: chat messages carry reasoning_content, and a stream's pieces add
// up to the non-streamed message (greedy, same request).
TEST(Routes, ReasoningParserFieldsStreamedAndWhole) {
  ServerProcess server({"--reasoning-parser", "qwen3"});
  const json body = {{"model", kModelName},
                     {"messages", {{{"role", "user"}, {"content", "Think, then answer."}}}},
                     {"max_tokens", 24},
                     {"temperature", 0}};
  const json whole = post_json(server.port(), "/v1/chat/completions", body);
  const json& message = whole["choices"][0]["message"];
  ASSERT_TRUE(message.contains("reasoning_content")) << message;
  json streamed_body = body;
  streamed_body["stream"] = true;
  auto res = client(server.port()).Post("/v1/chat/completions", streamed_body.dump(), "application/json");
  ASSERT_TRUE(res);
  std::string content, reasoning;
  std::istringstream lines(res->body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("data: {", 0) != 0) continue;
    const json delta = json::parse(line.substr(6))["choices"][0]["delta"];
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"].get<std::string>();
  }
  EXPECT_EQ(content, message["content"].is_null() ? "" : message["content"].get<std::string>());
  EXPECT_EQ(reasoning, message["reasoning_content"].is_null()
                           ? "" : message["reasoning_content"].get<std::string>());
  EXPECT_FALSE(content.empty() && reasoning.empty());
}

// --tool-call-parser hermes with tools in the request: the plumbing (this random model
// writes no tool markup, so its answers have no calls; tool_calls_test.cc parses real
// markup): tool_calls is a list, streamed and whole answers agree, tool_choice none works.
TEST(Routes, ToolCallParserKeepsPlainAnswersPlain) {
  ServerProcess server({"--tool-call-parser", "hermes", "--enable-auto-tool-choice"});
  const json tools = json::array({{{"type", "function"},
                                   {"function", {{"name", "get_weather"},
                                                 {"description", "Weather in a city"},
                                                 {"parameters", {{"type", "object"},
                                                                 {"properties", {{"city", {{"type", "string"}}}}}}}}}}});
  json body = {{"model", kModelName},
               {"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
               {"tools", tools},
               {"max_tokens", 12},
               {"temperature", 0}};
  const json whole = post_json(server.port(), "/v1/chat/completions", body);
  const json& message = whole["choices"][0]["message"];
  ASSERT_TRUE(message["tool_calls"].is_array());
  EXPECT_EQ(message["tool_calls"].size(), 0u);
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "length");
  body["stream"] = true;
  auto res = client(server.port()).Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  std::string content;
  std::istringstream lines(res->body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("data: {", 0) != 0) continue;
    const json delta = json::parse(line.substr(6))["choices"][0]["delta"];
    EXPECT_FALSE(delta.contains("tool_calls"));
    if (delta.contains("content")) content += delta["content"].get<std::string>();
  }
  EXPECT_EQ(content, message["content"].get<std::string>());
  body["stream"] = false;
  body["tool_choice"] = "none";
  EXPECT_EQ(post_json(server.port(), "/v1/chat/completions", body)["choices"][0]["message"]["content"],
            message["content"]);
}

// /tokenize counts as the completions count (usage.prompt_tokens of the same prompt and of
// the same messages) and /detokenize gives the text back.
TEST(Routes, TokenizeAgreesWithTheCompletionsAndDetokenizeInvertsIt) {
  ServerProcess server;
  const int port = server.port();
  const std::string text = "Paged attention, in one sentence: é漢字 ok";
  const json t = post_json(port, "/tokenize", {{"prompt", text}});
  ASSERT_TRUE(t["tokens"].is_array());
  EXPECT_EQ(t["count"], t["tokens"].size());
  EXPECT_EQ(t["max_model_len"], 4096);
  const json done = post_json(port, "/v1/completions",
                              {{"model", kModelName}, {"prompt", text}, {"max_tokens", 1}});
  EXPECT_EQ(done["usage"]["prompt_tokens"], t["count"]);
  EXPECT_EQ(post_json(port, "/detokenize", {{"tokens", t["tokens"]}})["prompt"], text);

  const json messages = {{{"role", "user"}, {"content", text}}};
  const json tm = post_json(port, "/tokenize", {{"messages", messages}});
  const json chat = post_json(port, "/v1/chat/completions",
                              {{"model", kModelName}, {"messages", messages}, {"max_tokens", 1}});
  EXPECT_EQ(chat["usage"]["prompt_tokens"], tm["count"]);

  EXPECT_EQ(post_json(port, "/detokenize", {{"tokens", {1, -5}}}, 400)["error"]["param"], "tokens");
  EXPECT_EQ(post_json(port, "/tokenize", {{"text", "x"}}, 400)["error"]["param"], "text");
  // The generation endpoints' body limits hold here too: 100 levels of nesting are refused
  // while parsing, before any chat template walks them.
  std::string deep = R"({"messages": [{"role": "user", "content": "x", "n": )";
  for (int i = 0; i < 100; ++i) deep += "[";
  for (int i = 0; i < 100; ++i) deep += "]";
  deep += "}]}";
  auto nested = client(port).Post("/tokenize", deep, "application/json");
  ASSERT_TRUE(nested);
  EXPECT_EQ(nested->status, 400);
  EXPECT_NE(nested->body.find("nested deeper than 64"), std::string::npos) << nested->body;
  // An object of very many keys costs the parser their number squared: 30,000 are refused
  // as they are read (a 1 MB body of 100,000 keys took 7 s before).
  std::string wide = R"({"text": "x", "logit_bias": {)";
  for (int i = 0; i < 30000; ++i) wide += (i ? ",\"" : "\"") + std::to_string(i) + "\": 1";
  wide += "}}";
  auto many = client(port).Post("/tokenize", wide, "application/json");
  ASSERT_TRUE(many);
  EXPECT_EQ(many->status, 400);
  EXPECT_NE(many->body.find("has objects of too many keys"), std::string::npos) << many->body;
}

}  // namespace
}  // namespace kestrel::server_test
