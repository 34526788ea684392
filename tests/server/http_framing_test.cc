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

// What httplib cannot parse or route is an OpenAI-style error too (it answered "HTTP error
// 400"): a malformed request line is a 400 that closes the connection (the bytes after it
// were read as further requests), a method httplib routes nowhere a 405 or 404, a malformed
// Range a 416.
TEST(HttpFraming, UnparsableRequestsGetJsonErrors) {
  ServerProcess server;
  const int port = server.port();
  const std::string health = "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n";
  for (const std::string line : {"FOO /health HTTP/1.1", "GET /health HTTP/3", "GET /health"}) {
    const std::string answer = raw_exchange(port, line + "\r\nHost: localhost\r\n\r\n" + health);
    const json e = raw_error(raw_first_response(answer), 400, line);
    EXPECT_NE(message_of(e).find("Malformed HTTP request"), std::string::npos) << e.dump();
    EXPECT_EQ(raw_first_response(answer), answer)
        << line << ": the connection went on after it:\n" << answer;
  }
  const std::string trace = raw_response(port, "TRACE /health HTTP/1.1\r\nHost: localhost\r\n\r\n");
  raw_error(trace, 405, "TRACE /health");
  EXPECT_NE(trace.find("\r\nAllow: GET\r\n"), std::string::npos) << trace;
  raw_error(raw_response(port, "TRACE /nowhere HTTP/1.1\r\nHost: localhost\r\n\r\n"), 404,
            "TRACE /nowhere");
  const json range = raw_error(
      raw_response(port, "GET /health HTTP/1.1\r\nHost: localhost\r\nRange: bytes=zz\r\n\r\n"),
      416, "malformed Range");
  EXPECT_NE(message_of(range).find("Range"), std::string::npos) << range.dump();
}

}  // namespace
}  // namespace kestrel::server_test
