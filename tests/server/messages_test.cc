// POST /v1/messages end to end: the official Anthropic client (tests/server/messages.mjs)
// against `kestrel serve` with --tool-call-parser hermes, the chat endpoint its oracle; and
// bad input over raw HTTP, each a 400 in Anthropic's shape while a stream runs undisturbed.
#include <thread>

#include "server_harness.h"

namespace kestrel::server_test {
namespace {

using json = nlohmann::json;

TEST(Messages, AnthropicClientAgainstTheChatEndpoint) {
  ServerProcess server({"--tool-call-parser", "hermes"});
  const NodeResult r = run_node("messages.mjs", server.port(), {}, 300s);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("OK"), std::string::npos) << r.output;
}

TEST(Messages, BadInputIsA400InAnthropicsShapeWhileAStreamRuns) {
  ServerProcess server;
  std::string streamed;
  std::thread stream([&] {
    auto res = client(server.port())
                   .Post("/v1/messages",
                         json{{"messages", {{{"role", "user"}, {"content", "Tell me a long story."}}}},
                              {"max_tokens", 200},
                              {"stream", true},
                              {"temperature", 0}}
                             .dump(),
                         "application/json");
    if (res) streamed = res->body;
  });
  for (const char* body : {"{", "[]", R"({"messages": [{"role": "user", "content": "x"}]})",
                           R"({"max_tokens": 4, "messages": "x"})",
                           R"({"max_tokens": 4, "messages": [{"role": "user", "content": 5}]})",
                           R"({"max_tokens": 4, "messages": [{"role": "user", "content": "x"}],
                               "temperature": "hot"})"}) {
    auto res = client(server.port()).Post("/v1/messages", body, "application/json");
    ASSERT_TRUE(res) << body;
    EXPECT_EQ(res->status, 400) << body;
    const json error = json::parse(res->body, nullptr, false);
    EXPECT_EQ(error.value("type", ""), "error") << res->body;
    EXPECT_EQ(error["error"].value("type", ""), "invalid_request_error") << res->body;
  }
  // Routing and auth errors on these paths take the same shape.
  auto get = client(server.port()).Get("/v1/messages");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405);
  EXPECT_EQ(json::parse(get->body)["error"].value("type", ""), "invalid_request_error");
  auto unauthorized = client(server.port(), false)
                          .Post("/v1/messages/count_tokens",
                                R"({"messages": [{"role": "user", "content": "x"}]})",
                                "application/json");
  ASSERT_TRUE(unauthorized);
  EXPECT_EQ(unauthorized->status, 401);
  EXPECT_EQ(json::parse(unauthorized->body)["error"].value("type", ""), "authentication_error");
  stream.join();
  EXPECT_NE(streamed.find("event: message_stop"), std::string::npos) << streamed.substr(0, 500);
}

}  // namespace
}  // namespace kestrel::server_test
