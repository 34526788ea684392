// Mistakes at the HTTP layer (the framing of a request, not its JSON) get an OpenAI-style
// error at once. They go over a raw socket: an HTTP client library would not send them as
// written.
#include "raw_http.h"
#include "server_harness.h"

namespace kestrel::server_test {
namespace {

using json = nlohmann::json;

const std::string kPost = "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " +
                          kApiKey + "\r\nContent-Type: application/json\r\n";

// Checks a raw response's status and its OpenAI error shape; returns the error object.
json raw_error(const std::string& answer, int status, const std::string& what) {
  EXPECT_EQ(raw_status(answer), status) << what << ": " << answer;
  EXPECT_NE(answer.find("\r\nContent-Type: application/json\r\n"), std::string::npos)
      << what << ": " << answer;
  const json body = json::parse(raw_body(answer), nullptr, false);
  if (body.is_discarded() || !body.contains("error") || !body["error"].is_object()) {
    ADD_FAILURE() << what << ": not an OpenAI error body: " << answer;
    return json::object();
  }
  const json& e = body["error"];
  EXPECT_TRUE(e.contains("message") && e["message"].is_string()) << what;
  EXPECT_TRUE(e.contains("type") && e["type"].is_string()) << what;
  EXPECT_TRUE(e.contains("code") && e.contains("param")) << what;
  return e;
}

std::string message_of(const json& error) {
  return error.contains("message") ? error["message"].get<std::string>() : "";
}

// Neither Content-Length nor Transfer-Encoding: the body is empty (RFC 9112 section 6.3), a
// 400 that says so; httplib alone waited 5 s for a body until the client closed.
TEST(HttpFraming, PostWithoutABodyIsAnEmptyBody400) {
  ServerProcess server;
  for (const std::string framing : {"", "Content-Length: 0\r\n"}) {
    const json e = raw_error(raw_response(server.port(), kPost + framing + "\r\n"), 400,
                             "framing '" + framing + "'");
    EXPECT_NE(message_of(e).find("empty"), std::string::npos) << e.dump();
  }
}

}  // namespace
}  // namespace kestrel::server_test
