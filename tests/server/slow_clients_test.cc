// Clients that send their request heads slowly, or sit on open connections, hold no HTTP
// worker (src/server/connection_gate.h): with more of them than workers, other clients are
// still served; a head that does not arrive in time gets a 408; past the connection limit a
// new connection gets a 503 at once.
#include <atomic>

#include "raw_http.h"
#include "server_harness.h"

namespace kestrel::server_test {
namespace {

const std::string kCompletion = R"({"prompt": "hi", "max_tokens": 1})";

TEST(SlowClients, SlowHeadsHoldNoWorkerAndGetA408) {
  ServerProcess server({"--http-threads", "2"});
  const int port = server.port();
  constexpr int kSlow = 8;  // four per worker
  std::vector<int> slow;
  for (int i = 0; i < kSlow; ++i) {
    const int fd = raw_connect(port, 30);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(raw_send(fd, "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"));
    slow.push_back(fd);
  }
  std::atomic<bool> dripping{true};
  std::thread drip([&] {  // a header line per slow client every 200 ms, never the end
    while (dripping) {
      for (int fd : slow) raw_send(fd, "X-Slow: 1\r\n");
      std::this_thread::sleep_for(200ms);
    }
  });
  // Served while they drip: with httplib's pool alone, the slow clients held both workers
  // for as long as they kept sending.
  auto c = client(port);
  c.set_read_timeout(20, 0);
  auto res = c.Post("/v1/completions", kCompletion, "application/json");
  dripping = false;
  drip.join();
  ASSERT_TRUE(res) << "no answer while " << kSlow << " clients sent their heads slowly";
  EXPECT_EQ(res->status, 200) << res->body;

  // Each slow head gets a 408 (10 s after its start), then the server closes.
  for (int fd : slow) {
    const std::string answer = raw_read_response(fd);
    EXPECT_EQ(raw_status(answer), 408) << answer;
    EXPECT_NE(answer.find("did not arrive within 10 s"), std::string::npos) << answer;
    char byte;
    EXPECT_EQ(::recv(fd, &byte, 1, 0), 0) << "the connection stayed open";
    ::close(fd);
  }
}

TEST(SlowClients, PastTheConnectionLimitANewConnectionGetsA503) {
  ServerProcess server({"--http-threads", "1"});  // 8 connections at most
  const int port = server.port();
  std::vector<int> idle;
  for (int i = 0; i < 8; ++i) {
    const int fd = raw_connect(port, 30);
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  const std::string head = "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n";
  const std::string refused = raw_response(port, head);
  EXPECT_EQ(raw_status(refused), 503) << refused;
  EXPECT_NE(refused.find("connections open"), std::string::npos) << refused;
  // An open connection is still served, and once they close new ones are too.
  ASSERT_TRUE(raw_send(idle[0], head));
  EXPECT_EQ(raw_status(raw_read_response(idle[0])), 200);
  for (int fd : idle) ::close(fd);
  const auto deadline = Clock::now() + 10s;
  int status = -1;
  while (status != 200 && Clock::now() < deadline) {
    status = raw_status(raw_response(port, head));
    if (status != 200) std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(status, 200);
}

}  // namespace
}  // namespace kestrel::server_test
