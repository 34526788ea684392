// Load and cancellation against `kestrel serve`:
//  - 240 concurrent streaming requests (40 distinct prompts and lengths, greedy and seeded
//    sampling, each sent 6 times) must each return exactly what the engine gives for that
//    request run alone (an in-process LLM, one request at a time): no tokens cross
//    between streams. The server's /metrics must count what was sent.
//  - Clients that drop mid-stream must leave no KV blocks in use.
#include <atomic>
#include <fstream>
#include <random>

#include "kestrel/llm.h"
#include "server_harness.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::server_test {
namespace {

using json = nlohmann::json;

const char* const kWords[] = {"river",   "stone",   "quietly", "market",    "seven",    "under",
                              "bright",  "coffee",  "engine",  "history",   "paper",    "north",
                              "because", "window",  "garden",  "silver",    "thinking", "music",
                              "Paris",   "numbers", "blue",    "carefully", "mountain", "the",
                              "a",       "of",      "and",     "tomorrow"};

struct Request {
  std::string prompt;
  int prompt_tokens = 0;
  int max_tokens = 0;
  float temperature = 0.0f;
  uint64_t seed = 0;
  std::string expected;
};

// Distinct prompts of 3 to 150 words, 1 to 48 new tokens; even ones greedy, odd ones
// sampled with their own seed.
std::vector<Request> make_workload(int count) {
  std::mt19937 rng(2024);
  std::vector<Request> out(count);
  for (int i = 0; i < count; ++i) {
    const int words = 3 + int(rng() % 148);
    for (int w = 0; w < words; ++w) {
      if (w > 0) out[i].prompt += ' ';
      out[i].prompt += kWords[rng() % std::size(kWords)];
    }
    out[i].max_tokens = 1 + int(rng() % 48);
    out[i].temperature = i % 2 ? 1.0f : 0.0f;
    out[i].seed = 1000 + i;
  }
  return out;
}

// The oracle: each request alone through the offline engine, decoded by the tokenizer.
void fill_expected(std::vector<Request>& work) {
  EngineConfig config;
  config.device = "cpu";
  config.num_kv_blocks = 256;
  config.num_threads = 2;
  LLM llm(model_dir(), config);
  for (Request& r : work) {
    SamplingParams p = llm.default_sampling_params();
    p.temperature = r.temperature;
    p.seed = r.seed;
    p.max_tokens = r.max_tokens;
    p.ignore_eos = true;
    const std::vector<int> ids = llm.tokenizer()->encode(r.prompt, true);
    r.prompt_tokens = static_cast<int>(ids.size());
    const RequestOutput out = llm.generate(std::vector<std::vector<int>>{ids}, p, false).at(0);
    ASSERT_EQ(static_cast<int>(out.outputs.at(0).token_ids.size()), r.max_tokens);
    r.expected = llm.tokenizer()->decode(out.outputs[0].token_ids, true);
  }
}

double delta(const std::string& before, const std::string& after, const std::string& name,
             const std::string& label = "") {
  return metric(after, name, label).value_or(-1) - metric(before, name, label).value_or(-1);
}

TEST(Load, ConcurrentStreamsMatchSingleRequestRunsAndMetrics) {
  constexpr int kDistinct = 40, kRepeat = 6;
  std::vector<Request> work = make_workload(kDistinct);
  fill_expected(work);
  json j = json::array();
  for (size_t i = 0; i < work.size(); ++i) {
    const Request& r = work[i];
    j.push_back({{"index", i},
                 {"prompt", r.prompt},
                 {"prompt_tokens", r.prompt_tokens},
                 {"max_tokens", r.max_tokens},
                 {"temperature", r.temperature},
                 {"seed", r.seed},
                 {"expected", r.expected}});
  }
  const std::string path =
      std::string(KESTREL_BINARY_DIR) + "/server_load_" + std::to_string(getpid()) + ".json";
  std::ofstream(path) << j.dump();

  ServerProcess server;
  const std::string before = get_metrics(server.port());
  const NodeResult r = run_node("load.mjs", server.port(),
                                {{"WORKLOAD", path}, {"REPEAT", std::to_string(kRepeat)}}, 170s);
  fs::remove(path);
  ASSERT_EQ(r.exit_code, 0) << r.output.substr(0, 8000);

  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (const Request& w : work) {
    prompt_tokens += int64_t(w.prompt_tokens) * kRepeat;
    completion_tokens += int64_t(w.max_tokens) * kRepeat;
  }
  const int n = kDistinct * kRepeat;
  ASSERT_TRUE(wait_engine_idle(server.port(), 10s));
  const std::string after = get_metrics(server.port());
  EXPECT_EQ(delta(before, after, "kestrel:request_success_total", "finished_reason=\"length\""), n);
  EXPECT_EQ(delta(before, after, "kestrel:request_success_total", "finished_reason=\"abort\""), 0);
  EXPECT_EQ(delta(before, after, "kestrel:prompt_tokens_total"), prompt_tokens);
  EXPECT_EQ(delta(before, after, "kestrel:generation_tokens_total"), completion_tokens);
  EXPECT_EQ(delta(before, after, "kestrel:time_to_first_token_seconds_count"), n);
  EXPECT_EQ(delta(before, after, "kestrel:e2e_request_latency_seconds_count"), n);
  // One inter-token gap per token after the first.
  EXPECT_EQ(delta(before, after, "kestrel:inter_token_latency_seconds_count"),
            completion_tokens - n);
  EXPECT_EQ(metric(after, "kestrel:kv_cache_usage_perc"), 0.0);
}

// Streams whose clients disconnect: Node clients abort after 3 chunks, C++ clients cancel
// the transfer after 2 events. Every one must be aborted and its blocks freed.
TEST(Cancel, DroppedStreamsFreeTheirBlocks) {
  ServerProcess server;
  const std::string before = get_metrics(server.port());
  constexpr int kNode = 24, kCpp = 8;
  const NodeResult r =
      run_node("cancel.mjs", server.port(), {{"COUNT", std::to_string(kNode)}}, 60s);
  ASSERT_EQ(r.exit_code, 0) << r.output.substr(0, 8000);

  std::atomic<int> cancelled{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kCpp; ++i) {
    threads.emplace_back([&, i] {
      json body = {{"model", kModelName},
                   {"prompt", "Cancel me " + std::to_string(i)},
                   {"max_tokens", 3000},
                   {"ignore_eos", true},
                   {"stream", true}};
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.headers = {{"Authorization", "Bearer " + kApiKey}};
      req.body = body.dump();
      int events = 0;
      req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
        for (size_t k = 0; k + 1 < len; ++k) events += data[k] == '\n' && data[k + 1] == '\n';
        return events < 2;
      };
      httplib::Response res;
      httplib::Error error;
      auto c = client(server.port());
      if (!c.send(req, res, error) && error == httplib::Error::Canceled) ++cancelled;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(cancelled, kCpp);

  ASSERT_TRUE(wait_engine_idle(server.port(), 15s)) << get_metrics(server.port());
  const std::string after = get_metrics(server.port());
  EXPECT_EQ(delta(before, after, "kestrel:request_success_total", "finished_reason=\"abort\""),
            kNode + kCpp);
  EXPECT_EQ(metric(after, "kestrel:kv_cache_used_blocks"), 0.0);
  // The server still serves.
  auto res = client(server.port())
                 .Post("/v1/completions", json{{"prompt", "still alive"}, {"max_tokens", 3}}.dump(),
                       "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
}

// A non-streamed request whose client hangs up (here: a read timeout of 0.5 s, far short of
// 4,000 tokens) is aborted, as dropped streams are: the engine goes idle long before it
// could have generated them all, and counts the request as aborted.
TEST(Cancel, ClosedConnectionsAbortNonStreamedRequests) {
  ServerProcess server;
  const std::string before = get_metrics(server.port());
  constexpr int kClients = 4;
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      auto c = client(server.port());
      c.set_read_timeout(0, 500'000);
      const json body = {{"model", kModelName}, {"prompt", "Hang up " + std::to_string(i)},
                         {"max_tokens", 4000},  {"ignore_eos", true}};
      auto res = c.Post("/v1/completions", body.dump(), "application/json");
      EXPECT_FALSE(res) << "finished 4000 tokens within 0.5 s";
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(wait_engine_idle(server.port(), 10s)) << get_metrics(server.port());
  const std::string after = get_metrics(server.port());
  EXPECT_EQ(delta(before, after, "kestrel:request_success_total", "finished_reason=\"abort\""),
            kClients);
  EXPECT_LT(delta(before, after, "kestrel:generation_tokens_total", ""), kClients * 4000);
}

}  // namespace
}  // namespace kestrel::server_test
