// Graceful shutdown of `kestrel serve` under load: on SIGTERM it stops accepting
// connections at once, lets in-flight requests finish for --shutdown-timeout, aborts the
// rest (their streams still end properly), and exits 0 in bounded time.
#include <atomic>
#include <mutex>

#include "server_harness.h"

namespace kestrel::server_test {
namespace {

using json = nlohmann::json;

struct StreamResult {
  std::atomic<int> chunks{0};
  std::string text;
  std::string finish_reason;
  bool done = false;  // saw data: [DONE]
  bool transport_ok = false;
};

void stream(int port, int max_tokens, int seed, StreamResult& out) {
  const json body = {{"model", kModelName},
                     {"prompt", "Shutdown story number " + std::to_string(seed)},
                     {"max_tokens", max_tokens},
                     {"temperature", 1.0},
                     {"seed", seed},
                     {"ignore_eos", true},
                     {"stream", true}};
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Authorization", "Bearer " + kApiKey}};
  req.body = body.dump();
  std::string buffer;
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    buffer.append(data, len);
    size_t end;
    while ((end = buffer.find("\n\n")) != std::string::npos) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event == "data: [DONE]") {
        out.done = true;
      } else if (event.rfind("data: ", 0) == 0) {
        const json chunk = json::parse(event.substr(6));
        for (const auto& c : chunk["choices"]) {
          out.text += c["text"].get<std::string>();
          if (c["finish_reason"].is_string()) out.finish_reason = c["finish_reason"];
        }
        ++out.chunks;
      }
    }
    return true;
  };
  httplib::Response res;
  httplib::Error error;
  out.transport_ok = client(port).send(req, res, error) && res.status == 200;
}

TEST(Shutdown, SigtermFinishesShortRequestsAbortsLongOnesAndExitsZero) {
  constexpr int kTimeoutS = 3;
  ServerProcess server({"--shutdown-timeout", std::to_string(kTimeoutS)});
  const int port = server.port();
  constexpr int kShort = 4, kLong = 4;
  std::vector<StreamResult> results(kShort + kLong);
  std::vector<std::thread> threads;
  for (int i = 0; i < kShort + kLong; ++i) {
    // Short ones end well within the timeout; long ones (4000 steps in 3 s) cannot.
    threads.emplace_back(stream, port, i < kShort ? 20 : 4000, i, std::ref(results[i]));
  }
  const auto deadline = Clock::now() + 60s;
  auto all_started = [&] {
    for (const auto& r : results) {
      if (r.chunks == 0) return false;
    }
    return true;
  };
  while (!all_started() && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(all_started());

  const auto t0 = Clock::now();
  server.child().signal(SIGTERM);
  // New connections are refused from now on (give the signal a moment to land).
  std::this_thread::sleep_for(500ms);
  auto refused = client(port).Get("/health");
  EXPECT_FALSE(refused) << "a new connection was accepted after SIGTERM";

  const std::optional<int> code = server.child().wait(std::chrono::seconds(kTimeoutS + 10));
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  for (auto& t : threads) t.join();
  ASSERT_TRUE(code.has_value()) << "the server did not exit\n" << server.child().output();
  EXPECT_EQ(*code, 0) << server.child().output();
  EXPECT_LT(seconds, kTimeoutS + 5.0);
  EXPECT_GT(seconds, kTimeoutS - 0.5) << "the long requests were not given the shutdown timeout";
  for (int i = 0; i < kShort + kLong; ++i) {
    const StreamResult& r = results[i];
    EXPECT_TRUE(r.transport_ok) << "stream " << i;
    EXPECT_TRUE(r.done) << "stream " << i << " ended without [DONE]";
    EXPECT_EQ(r.finish_reason, i < kShort ? "length" : "abort") << "stream " << i;
  }
}

// A background response (run past its request) counts as in flight: SIGTERM waits for it
// up to --shutdown-timeout, then aborts it, and the server exits 0 in bounded time.
TEST(Shutdown, SigtermWaitsForBackgroundResponsesThenExits) {
  constexpr int kTimeoutS = 2;
  ServerProcess server({"--shutdown-timeout", std::to_string(kTimeoutS)});
  const int port = server.port();
  auto res = client(port).Post("/v1/responses",
                               json{{"input", "Tell me a very long story."},
                                    {"max_output_tokens", 3000},
                                    {"background", true}}
                                   .dump(),
                               "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json queued = json::parse(res->body);
  EXPECT_EQ(queued["status"], "queued") << res->body;
  const std::string path = "/v1/responses/" + queued["id"].get<std::string>();
  std::string status;
  for (const auto deadline = Clock::now() + 30s; Clock::now() < deadline && status != "in_progress";) {
    auto polled = client(port).Get(path);
    ASSERT_TRUE(polled);
    status = json::parse(polled->body)["status"];
    if (status != "queued" && status != "in_progress") break;  // ended early: still fine
    std::this_thread::sleep_for(10ms);
  }
  const auto t0 = Clock::now();
  server.child().signal(SIGTERM);
  const std::optional<int> code = server.child().wait(std::chrono::seconds(kTimeoutS + 10));
  ASSERT_TRUE(code.has_value()) << "the server did not exit\n" << server.child().output();
  EXPECT_EQ(*code, 0) << server.child().output();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), kTimeoutS + 5.0);
}

TEST(Shutdown, SigintOnAnIdleServerExitsZeroAtOnce) {
  ServerProcess server;
  auto idle = client(server.port());
  idle.set_keep_alive(true);
  auto res = idle.Get("/health");  // leaves an idle keep-alive connection open
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  const auto t0 = Clock::now();
  server.child().signal(SIGINT);
  const std::optional<int> code = server.child().wait(10s);
  ASSERT_TRUE(code.has_value()) << server.child().output();
  EXPECT_EQ(*code, 0) << server.child().output();
  // Not held by the idle connection's keep-alive timeout (5 s).
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0);
}

// A second server on a port that one already listens on fails at startup, naming the
// problem, and the first keeps serving (httplib's SO_REUSEPORT let both bind).
TEST(Startup, APortInUseIsAnErrorAtStartup) {
  ServerProcess first;
  Child second({std::string(KESTREL_BINARY_DIR) + "/kestrel", "serve", "--model", model_dir(),
                "--port", std::to_string(first.port()), "--device", "cpu", "--threads", "2",
                "--num-kv-blocks", "64", "--log-level", "warn"},
               child_env());
  const std::optional<int> code = second.wait(60s);
  ASSERT_TRUE(code.has_value()) << "the second server did not exit:\n" << second.output();
  EXPECT_NE(*code, 0);
  EXPECT_NE(second.output().find("address already in use"), std::string::npos) << second.output();
  auto res = client(first.port()).Get("/health");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

}  // namespace
}  // namespace kestrel::server_test
