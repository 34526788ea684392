// POST /v1/responses end to end: the official openai client (tests/server/responses.mjs)
// against `kestrel serve` with --tool-call-parser hermes, and bad input over raw HTTP, each
// a 400 naming its field while a streamed response runs undisturbed.
#include <thread>

#include "server_harness.h"

namespace kestrel::server_test {
namespace {

using json = nlohmann::json;

TEST(Responses, OpenAIClientAgainstTheChatEndpoint) {
  ServerProcess server({"--tool-call-parser", "hermes"});
  const NodeResult r = run_node("responses.mjs", server.port(), {}, 300s);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("OK"), std::string::npos) << r.output;
}

TEST(Responses, BadInputIsA400NamingTheField) {
  ServerProcess server;
  // A long stream runs meanwhile; the refusals must not disturb it.
  std::string streamed;
  std::thread stream([&] {
    auto res = client(server.port())
                   .Post("/v1/responses",
                         json{{"input", "Tell me a long story."},
                              {"max_output_tokens", 200},
                              {"stream", true},
                              {"temperature", 0}}
                             .dump(),
                         "application/json");
    if (res) streamed = res->body;
  });
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"input": "x", "previous_response_id": "resp_1"})", "previous_response_id"},
      {R"({"input": "x", "background": true, "store": false})", "background"},
      {R"({"input": "x", "include": ["file_search_call.results"]})", "include"},
      {R"({"input": "x", "tools": [{"type": "web_search_preview"}]})", "tools"},
      {R"({"input": "x", "tools": [{"type": "function"}]})", "tools"},
      {R"({"input": "x", "unknown_field": 1})", "unknown_field"},
      {R"({"instructions": "x"})", "input"},
      {R"({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]})",
       "input"},
      {R"({"input": "x", "max_output_tokens": 0})", "max_output_tokens"},
      {R"({"input": "x", "max_output_tokens": 5000})", "max_output_tokens"},
      {R"({"input": "x", "temperature": -1})", "temperature"},
      {R"({"input": "x", "top_p": "high"})", "top_p"},
      {R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "s"}}})",
       "text.format.schema"},
      {R"({"input": "x", "tool_choice": "required"})", "tool_choice"},
      {R"({"input": "x", "stream": "yes"})", "stream"},
  };
  for (const auto& [body, param] : cases) {
    auto res = client(server.port()).Post("/v1/responses", body, "application/json");
    if (!res) {
      ADD_FAILURE() << "no answer to " << body;
      continue;
    }
    EXPECT_EQ(res->status, 400) << body << " -> " << res->body;
    const json error = json::parse(res->body)["error"];
    EXPECT_EQ(error["param"], param) << body << " -> " << res->body;
    EXPECT_EQ(error["type"], "invalid_request_error") << res->body;
  }
  stream.join();
  auto not_json = client(server.port()).Post("/v1/responses", "{", "application/json");
  ASSERT_TRUE(not_json);
  EXPECT_EQ(not_json->status, 400);
  auto model =
      client(server.port())
          .Post("/v1/responses", R"({"input": "x", "model": "gpt-4o"})", "application/json");
  ASSERT_TRUE(model);
  EXPECT_EQ(model->status, 404);
  auto get = client(server.port()).Get("/v1/responses");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405);
  EXPECT_EQ(get->get_header_value("Allow"), "POST");
  auto no_key =
      client(server.port(), false).Post("/v1/responses", R"({"input": "x"})", "application/json");
  ASSERT_TRUE(no_key);
  EXPECT_EQ(no_key->status, 401);

  EXPECT_NE(streamed.find("event: response.created\n"), std::string::npos)
      << streamed.substr(0, 2000);
  const bool ended = streamed.find("event: response.completed\n") != std::string::npos ||
                     streamed.find("event: response.incomplete\n") != std::string::npos;
  EXPECT_TRUE(ended) << streamed.substr(streamed.size() > 2000 ? streamed.size() - 2000 : 0);
  EXPECT_TRUE(wait_engine_idle(server.port(), 10s));
}

// The stored responses' routes over raw HTTP: the methods each path takes, 404s naming the
// unknown id, and a server that stores nothing (--responses-store-max 0).
TEST(Responses, StoredResponseRoutes) {
  ServerProcess server({"--responses-store-max", "0"});
  auto off = client(server.port())
                 .Post("/v1/responses", R"({"input": "x", "max_output_tokens": 2})",
                       "application/json");
  ASSERT_TRUE(off);
  EXPECT_EQ(off->status, 200) << off->body;
  EXPECT_EQ(json::parse(off->body)["store"], false) << off->body;
  const std::string id = json::parse(off->body)["id"];
  auto continued =
      client(server.port())
          .Post("/v1/responses", json{{"input", "y"}, {"previous_response_id", id}}.dump(),
                "application/json");
  ASSERT_TRUE(continued);
  EXPECT_EQ(continued->status, 400) << continued->body;
  EXPECT_EQ(json::parse(continued->body)["error"]["param"], "previous_response_id");
  EXPECT_NE(continued->body.find("stores none"), std::string::npos) << continued->body;
  for (const char* method : {"GET", "DELETE"}) {
    httplib::Request req;
    req.method = method;
    req.path = "/v1/responses/" + id;
    auto res = client(server.port()).send(req);
    ASSERT_TRUE(res) << method;
    EXPECT_EQ(res->status, 404) << method << " " << res->body;
    const json error = json::parse(res->body)["error"];
    EXPECT_EQ(error["code"], "response_not_found") << res->body;
    EXPECT_NE(error["message"].get<std::string>().find(id), std::string::npos) << res->body;
  }
  auto post = client(server.port()).Post("/v1/responses/" + id, "{}", "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  EXPECT_EQ(post->get_header_value("Allow"), "GET, DELETE");
  auto items = client(server.port()).Get("/v1/responses/" + id + "/input_items");
  ASSERT_TRUE(items);
  EXPECT_EQ(items->status, 404) << items->body;
  EXPECT_EQ(json::parse(items->body)["error"]["code"], "response_not_found") << items->body;
  auto post_items =
      client(server.port()).Post("/v1/responses/" + id + "/input_items", "{}", "application/json");
  ASSERT_TRUE(post_items);
  EXPECT_EQ(post_items->status, 405);
  EXPECT_EQ(post_items->get_header_value("Allow"), "GET");
  auto deeper = client(server.port()).Get("/v1/responses/" + id + "/input_items/x");
  ASSERT_TRUE(deeper);
  EXPECT_EQ(deeper->status, 404);
  auto cancel = client(server.port()).Post("/v1/responses/" + id + "/cancel", "", "application/json");
  ASSERT_TRUE(cancel);
  EXPECT_EQ(cancel->status, 404) << cancel->body;
  EXPECT_EQ(json::parse(cancel->body)["error"]["code"], "response_not_found") << cancel->body;
  auto get_cancel = client(server.port()).Get("/v1/responses/" + id + "/cancel");
  ASSERT_TRUE(get_cancel);
  EXPECT_EQ(get_cancel->status, 405);
  EXPECT_EQ(get_cancel->get_header_value("Allow"), "POST");
  // Background responses live in the store, which this server does not have.
  auto background = client(server.port())
                        .Post("/v1/responses", R"({"input": "x", "background": true})",
                              "application/json");
  ASSERT_TRUE(background);
  EXPECT_EQ(background->status, 400) << background->body;
  EXPECT_EQ(json::parse(background->body)["error"]["param"], "background");
  EXPECT_NE(background->body.find("stores none"), std::string::npos) << background->body;
  auto no_key = client(server.port(), false).Get("/v1/responses/" + id);
  ASSERT_TRUE(no_key);
  EXPECT_EQ(no_key->status, 401);
}

}  // namespace
}  // namespace kestrel::server_test
