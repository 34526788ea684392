// A deterministic fuzz campaign against the request handling of POST /v1/completions,
// /v1/chat/completions, /v1/responses, /v1/messages (and count_tokens), /tokenize and
// /detokenize. Valid bodies using every
// documented field (fuzz_inputs.h) are mutated structurally (each member dropped or set to
// values of every JSON type, duplicate keys, deep nesting, lone surrogates, NUL, invalid
// UTF-8, token ids out of range, prompts past max_model_len, extreme n and max_tokens) and
// byte-wise (truncations, byte flips, wrong Content-Types), with fixed seeds. Oracle: each
// answer has a documented status; an error is OpenAI's error JSON with a message (Anthropic's
// on the Messages API); a 200 is
// JSON or a whole SSE stream; no request takes more than a few seconds; afterwards the
// server is alive, idle (no KV block held), counted no engine error, and gives the same
// greedy text as before.
#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <set>

#include "fuzz_inputs.h"
#include "server_harness.h"

namespace kestrel::server_test {
namespace {

using fuzz::Input;
using fuzz::ojson;
using json = nlohmann::json;

constexpr double kSlowSeconds = 8.0;
const std::set<int> kStatuses = {200, 400, 404, 405, 408, 413, 414, 415, 422, 431, 503};

bool is_messages(const std::string& path) { return path.rfind("/v1/messages", 0) == 0; }

// "" when `body` is Anthropic's error object with a type and a message, else what is wrong.
std::string check_anthropic_error(const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("type", "") != "error" ||
      !j.contains("error") || !j["error"].is_object())
    return "not an Anthropic error body";
  const json& e = j["error"];
  if (!e.contains("type") || !e["type"].is_string()) return "error without a type";
  if (!e.contains("message") || !e["message"].is_string() ||
      e["message"].get<std::string>().empty())
    return "error without a message";
  return "";
}

// "" when `error` is the path's error object (OpenAI's, or Anthropic's on the Messages API)
// with a message, else what is wrong.
std::string check_error_body(const std::string& body, const std::string& path = "") {
  if (is_messages(path)) return check_anthropic_error(body);
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("error") || !j["error"].is_object())
    return "not an OpenAI error body";
  const json& e = j["error"];
  if (!e.contains("message") || !e["message"].is_string() ||
      e["message"].get<std::string>().empty())
    return "error without a message";
  if (!e.contains("type") || !e["type"].is_string()) return "error without a type";
  if (!e.contains("param") || !e.contains("code")) return "error without param or code";
  return "";
}

// "" when `body` is a complete SSE stream of `path`, else what is wrong.
std::string check_stream(const std::string& path, const std::string& body) {
  const bool responses = path == "/v1/responses", messages = is_messages(path);
  std::string last_type;
  bool done = false;
  size_t events = 0;
  for (size_t pos = 0; pos < body.size();) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) return "an event without its blank line at its end";
    const std::string event = body.substr(pos, end - pos);
    pos = end + 2;
    if (event.rfind(":", 0) == 0) continue;  // a ping comment
    const size_t data = event.find("data: ");
    if (data == std::string::npos) return "an event without data: " + event.substr(0, 200);
    const std::string payload = event.substr(data + 6);
    if (done) return "data after [DONE]";
    ++events;
    if (payload == "[DONE]") {
      done = true;
      continue;
    }
    const json j = json::parse(payload, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      return "a data line that is not JSON: " + payload.substr(0, 200);
    if ((j.contains("error") && !j["error"].is_null()) || j.value("type", "") == "error")
      return "an error in the stream: " + payload.substr(0, 300);
    if (responses || messages) last_type = j.value("type", "");
  }
  if (events == 0) return "an empty stream";
  if (messages) {
    if (last_type != "message_stop") return "a messages stream ending with " + last_type;
  } else if (responses) {
    if (last_type != "response.completed" && last_type != "response.incomplete")
      return "a responses stream ending with " + last_type;
  } else if (!done) {
    return "a stream without data: [DONE]";
  }
  return "";
}

// The oracle's verdicts over a campaign; send() may be called from several threads.
struct Campaign {
  int port;
  std::mutex mu;
  int sent = 0, failed = 0;
  std::map<int, int> statuses;
  std::vector<std::string> failures;  // one report per kind of failure
  std::set<std::string> kinds;
  double slowest = 0;
  std::string slowest_what;

  explicit Campaign(int p) : port(p) {}

  // Sends `in` on `http` and checks the answer; a failure is recorded with its input.
  void send(httplib::Client& http, const Input& in) {
    const auto start = Clock::now();
    httplib::Result res = in.content_type.empty()
                              ? http.Post(in.path, httplib::Headers{}, in.body, "")
                              : http.Post(in.path, in.body, in.content_type);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const std::string problem = verdict(in, res, seconds);
    std::lock_guard lock(mu);
    ++sent;
    if (res) ++statuses[res->status];
    if (seconds > slowest) slowest = seconds, slowest_what = in.path + " " + in.what;
    if (problem.empty()) return;
    ++failed;
    const json answer = res ? json::parse(res->body, nullptr, false) : json();
    const json message =
        answer.is_object() ? answer.value("/error/message"_json_pointer, json()) : json();
    const std::string kind =
        problem + in.path + (message.is_string() ? message.get<std::string>().substr(0, 60) : "");
    if (!kinds.insert(kind).second || failures.size() >= 30) return;
    const std::string body = in.body.size() > 600 ? in.body.substr(0, 600) + "..." : in.body;
    failures.push_back(
        problem + "\n  input: " + in.path + " " + in.what + " (" + in.content_type +
        ")\n  body: " + body + "\n  answer: " +
        (res ? std::to_string(res->status) + " " + res->body.substr(0, 600) : "none"));
  }

  // "" when the answer passes the oracle, else what is wrong.
  static std::string verdict(const Input& in, const httplib::Result& res, double seconds) {
    if (!res) return "no answer (" + httplib::to_string(res.error()) + ")";
    if (!kStatuses.count(res->status)) return "status " + std::to_string(res->status);
    if (seconds > kSlowSeconds) return "took " + std::to_string(seconds) + " s";
    if (res->status != 200) return check_error_body(res->body, in.path);
    if (res->get_header_value("Content-Type").rfind("text/event-stream", 0) == 0)
      return check_stream(in.path, res->body);
    const json j = json::parse(res->body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || (j.contains("error") && !j["error"].is_null()))
      return "a 200 body that is not a JSON answer";
    return "";
  }

  // Sends every input from `threads` clients at once (the engine batches their requests;
  // each checks that the others do not disturb it).
  void run_all(const std::vector<Input>& inputs, int threads) {
    std::atomic<size_t> next{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&] {
        httplib::Client http = client(port);
        http.set_keep_alive(true);
        http.set_tcp_nodelay(true);
        http.set_read_timeout(20, 0);
        for (size_t i; (i = next++) < inputs.size();) send(http, inputs[i]);
      });
    }
    for (std::thread& t : pool) t.join();
  }
};

std::string greedy_text(int port) {
  auto res = client(port).Post(
      "/v1/completions",
      R"({"prompt": "The quick brown fox", "max_tokens": 8, "temperature": 0, "ignore_eos": true})",
      "application/json");
  if (!res || res->status != 200) return "failed: " + (res ? res->body : std::string("no answer"));
  return json::parse(res->body)["choices"][0]["text"].get<std::string>();
}

TEST(Fuzz, RequestHandlingSurvivesMutatedBodies) {
  // A short context keeps every accepted request cheap (chat without max_tokens runs to it).
  ServerProcess server(
      {"--max-model-len", "256", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3"});
  const int port = server.port();
  const std::string before = greedy_text(port);
  ASSERT_EQ(before.rfind("failed", 0), std::string::npos) << before;

  Campaign c(port);
  const std::vector<fuzz::Base> bases = fuzz::bases();
  // Every base as it is: a 200.
  for (const fuzz::Base& b : bases) {
    auto res = client(port).Post(b.path, b.body.dump(), "application/json");
    ASSERT_TRUE(res) << b.path << " " << b.body.dump();
    EXPECT_EQ(res->status, 200) << b.path << " " << b.body.dump() << "\n" << res->body;
  }

  const std::vector<Input> inputs = fuzz::campaign(bases, 20261127);
  const auto start = Clock::now();
  c.run_all(inputs, 4);
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  // Other methods on the POST routes: 405s in OpenAI's error shape.
  for (const char* path : {"/v1/completions", "/v1/chat/completions", "/v1/responses",
                           "/v1/messages", "/tokenize", "/detokenize"}) {
    httplib::Client http = client(port);
    for (int method = 0; method < 3; ++method) {
      auto res = method == 0   ? http.Get(path)
                 : method == 1 ? http.Put(path, "{}", "application/json")
                               : http.Delete(path);
      ASSERT_TRUE(res) << path;
      EXPECT_EQ(res->status, 405) << path;
      EXPECT_EQ(check_error_body(res->body, path), "") << path << ": " << res->body;
    }
  }
  std::string statuses;
  for (const auto& [s, n] : c.statuses)
    statuses += " " + std::to_string(s) + ":" + std::to_string(n);
  std::printf("fuzz: %d requests in %.1f s, statuses%s; slowest %.2f s (%s)\n", c.sent, took,
              statuses.c_str(), c.slowest, c.slowest_what.c_str());
  EXPECT_EQ(c.failed, 0) << "requests failing the oracle; one of each kind follows";
  for (const std::string& f : c.failures) ADD_FAILURE() << f;

  // The server is alive, idle, counted no engine error, and answers as before.
  ASSERT_FALSE(server.child().wait(0ms).has_value()) << server.child().output();
  EXPECT_TRUE(wait_engine_idle(port, 10s)) << get_metrics(port);
  EXPECT_EQ(metric(get_metrics(port), "kestrel:request_success_total", "\"error\""), 0.0);
  auto health = client(port).Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(greedy_text(port), before);
}

}  // namespace
}  // namespace kestrel::server_test
