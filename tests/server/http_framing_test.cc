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

// Heads over httplib's sizes are refused by size, in JSON, before they are read whole: a
// 1 MB header line or 40 KiB of headers is a 431, a 10,000-byte URI a 414 (httplib alone
// answered "HTTP error 400" for the first two after reading them whole).
TEST(HttpFraming, OversizedHeadsAre431AndLongUrisAre414) {
  ServerProcess server;
  const std::string health = "GET /health HTTP/1.1\r\nHost: localhost\r\n";
  const json big_line =
      raw_error(raw_response(server.port(), health + "X-Big: " + std::string(1 << 20, 'a') +
                                                 "\r\n\r\n"),
                431, "1 MB header line");
  EXPECT_NE(message_of(big_line).find("header fields are too large"), std::string::npos)
      << big_line.dump();
  std::string many = health;
  for (int i = 0; i < 400; ++i) many += "X-Many-" + std::to_string(i) + ": " + std::string(90, 'b') + "\r\n";
  raw_error(raw_response(server.port(), many + "\r\n"), 431, "400 header lines");
  const json uri = raw_error(
      raw_response(server.port(), "GET /" + std::string(10000, 'u') + " HTTP/1.1\r\n\r\n"), 414,
      "10,000-byte URI");
  EXPECT_NE(message_of(uri).find("request line is longer than 8192 bytes"), std::string::npos)
      << uri.dump();
  // The server is fine afterwards.
  EXPECT_EQ(raw_status(raw_response(server.port(), health + "\r\n")), 200);
}

}  // namespace
}  // namespace kestrel::server_test
