// kestrel bench-serve: a serving benchmark in the manner of vLLM's benchmark_serving.py
// (random dataset). It sends N requests of random token ids to a running server's
// /v1/completions with ignore_eos, arriving as a Poisson process at --request-rate (or all
// at once), streams each, and reports throughput, TTFT, TPOT and inter-token latency.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "cli/commands.h"
#include "cli/flags.h"
#include "core/error.h"

namespace kestrel::cli {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string model;  // "": ask /v1/models
  std::string api_key;
  int num_prompts = 100;
  int input_len = 128;
  int output_len = 128;
  double range_ratio = 0.0;  // lengths uniform in [len * (1 - r), len * (1 + r)]
  double request_rate = std::numeric_limits<double>::infinity();
  int max_concurrency = 0;  // 0: unlimited
  int vocab_size = 32000;   // prompt ids are drawn from [0, vocab_size)
  uint64_t seed = 0;
  std::string output_json;
};

struct RequestResult {
  bool ok = false;
  std::string error;
  int prompt_len = 0;
  int output_tokens = 0;    // from the usage chunk
  double ttft = 0.0;        // s, to the first chunk with a choice
  double latency = 0.0;     // s, to [DONE]
  std::vector<double> itl;  // s, between chunks after the first
};

httplib::Headers auth_headers(const Options& o) {
  httplib::Headers h;
  if (!o.api_key.empty()) h.emplace("Authorization", "Bearer " + o.api_key);
  return h;
}

// One streamed request. SSE events are separated by a blank line; only "data:" lines matter.
RequestResult run_request(const Options& o, const std::vector<int>& prompt, int max_tokens) {
  RequestResult r;
  r.prompt_len = static_cast<int>(prompt.size());
  json body = {{"model", o.model},
               {"prompt", prompt},
               {"max_tokens", max_tokens},
               {"temperature", 0.0},
               {"ignore_eos", true},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  httplib::Client client(o.host, o.port);
  client.set_read_timeout(600, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = auth_headers(o);
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  std::string buffer;
  bool first = true, done = false;
  Clock::time_point last;
  const Clock::time_point start = Clock::now();
  auto on_event = [&](const std::string& data) {
    const Clock::time_point now = Clock::now();
    if (data == "[DONE]") {
      done = true;
      r.latency = std::chrono::duration<double>(now - start).count();
      return;
    }
    json chunk = json::parse(data, nullptr, false);
    if (chunk.is_discarded()) return;
    if (chunk.contains("error")) r.error = chunk["error"].value("message", "error");
    if (chunk.contains("usage") && chunk["usage"].is_object()) {
      r.output_tokens = chunk["usage"].value("completion_tokens", 0);
    }
    if (!chunk.contains("choices") || chunk["choices"].empty()) return;
    if (first) {
      r.ttft = std::chrono::duration<double>(now - start).count();
      first = false;
    } else {
      r.itl.push_back(std::chrono::duration<double>(now - last).count());
    }
    last = now;
  };
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    buffer.append(data, len);
    size_t end;
    while ((end = buffer.find("\n\n")) != std::string::npos) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) == 0) on_event(event.substr(6));
    }
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  if (!client.send(req, res, error)) {
    r.error = "connection failed: " + httplib::to_string(error);
  } else if (res.status != 200) {
    r.error = fmt::format("HTTP {}: {}", res.status, res.body.empty() ? buffer : res.body);
  } else if (!done && r.error.empty()) {
    r.error = "stream ended without [DONE]";
  }
  r.ok = r.error.empty() && done;
  return r;
}

// numpy.percentile's default (linear interpolation).
double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double pos = p / 100.0 * double(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / double(v.size());
}

std::string discover_model(const Options& o) {
  httplib::Client client(o.host, o.port);
  auto res = client.Get("/v1/models", auth_headers(o));
  KS_CHECK(res, "cannot reach http://{}:{}/v1/models: {}", o.host, o.port,
           httplib::to_string(res.error()));
  KS_CHECK(res->status == 200, "GET /v1/models: HTTP {} {}", res->status, res->body);
  json j = json::parse(res->body, nullptr, false);
  KS_CHECK(!j.is_discarded() && j.contains("data") && !j["data"].empty(),
           "GET /v1/models: no model listed");
  return j["data"][0].value("id", "");
}

int run(const Options& o_in) {
  Options o = o_in;
  if (o.model.empty()) o.model = discover_model(o);
  std::mt19937_64 rng(o.seed);
  auto length = [&](int len) {
    const int lo = std::max(1, int(std::floor(len * (1.0 - o.range_ratio))));
    const int hi = std::max(lo, int(std::ceil(len * (1.0 + o.range_ratio))));
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  std::vector<std::vector<int>> prompts(o.num_prompts);
  std::vector<int> max_tokens(o.num_prompts);
  std::uniform_int_distribution<int> token(0, o.vocab_size - 1);
  for (int i = 0; i < o.num_prompts; ++i) {
    prompts[i].resize(length(o.input_len));
    for (int& t : prompts[i]) t = token(rng);
    max_tokens[i] = length(o.output_len);
  }
  // Poisson arrivals: exponential gaps with mean 1 / rate.
  std::vector<double> send_at(o.num_prompts, 0.0);
  if (std::isfinite(o.request_rate)) {
    std::exponential_distribution<double> gap(o.request_rate);
    double t = 0;
    for (double& s : send_at) s = (t += gap(rng));
  }

  const RequestResult warm = run_request(o, {1, 2, 3, 4}, 2);
  KS_CHECK(warm.ok, "warm-up request failed: {}", warm.error);

  std::vector<RequestResult> results(o.num_prompts);
  std::mutex mu;
  std::condition_variable cv;
  int active = 0;
  std::vector<std::thread> threads;
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < o.num_prompts; ++i) {
    threads.emplace_back([&, i] {
      std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                                std::chrono::duration<double>(send_at[i])));
      if (o.max_concurrency > 0) {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return active < o.max_concurrency; });
        ++active;
      }
      results[i] = run_request(o, prompts[i], max_tokens[i]);
      if (o.max_concurrency > 0) {
        std::lock_guard lock(mu);
        --active;
        cv.notify_one();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const double duration = std::chrono::duration<double>(Clock::now() - start).count();

  int ok = 0;
  int64_t input_tokens = 0, output_tokens = 0;
  std::vector<double> ttft, tpot, itl, e2e;
  for (const RequestResult& r : results) {
    if (!r.ok) {
      std::fprintf(stderr, "request failed: %s\n", r.error.c_str());
      continue;
    }
    ++ok;
    input_tokens += r.prompt_len;
    output_tokens += r.output_tokens;
    ttft.push_back(r.ttft * 1e3);
    e2e.push_back(r.latency * 1e3);
    if (r.output_tokens > 1) tpot.push_back((r.latency - r.ttft) * 1e3 / (r.output_tokens - 1));
    for (double x : r.itl) itl.push_back(x * 1e3);
  }
  auto line = [](const char* name, const std::string& value) {
    std::printf("%-40s %s\n", name, value.c_str());
  };
  auto num = [](double v) { return fmt::format("{:.2f}", v); };
  std::printf("============ Serving Benchmark Result ============\n");
  line("Successful requests:", std::to_string(ok));
  line("Failed requests:", std::to_string(o.num_prompts - ok));
  line("Request rate (req/s):", std::isfinite(o.request_rate) ? num(o.request_rate) : "inf");
  line("Benchmark duration (s):", num(duration));
  line("Total input tokens:", std::to_string(input_tokens));
  line("Total generated tokens:", std::to_string(output_tokens));
  line("Request throughput (req/s):", num(ok / duration));
  line("Output token throughput (tok/s):", num(output_tokens / duration));
  line("Total token throughput (tok/s):", num((input_tokens + output_tokens) / duration));
  auto section = [&](const char* title, const char* key, const std::vector<double>& v) {
    std::printf("%s\n", title);
    line(fmt::format("Mean {} (ms):", key).c_str(), num(mean(v)));
    line(fmt::format("Median {} (ms):", key).c_str(), num(percentile(v, 50)));
    line(fmt::format("P99 {} (ms):", key).c_str(), num(percentile(v, 99)));
  };
  section("---------------Time to First Token----------------", "TTFT", ttft);
  section("-----Time per Output Token (excl. 1st token)------", "TPOT", tpot);
  section("---------------Inter-token Latency----------------", "ITL", itl);
  section("----------------End-to-end Latency----------------", "E2EL", e2e);
  std::printf("==================================================\n");

  if (!o.output_json.empty()) {
    json j = {{"completed", ok},
              {"failed", o.num_prompts - ok},
              {"duration_s", duration},
              {"total_input_tokens", input_tokens},
              {"total_output_tokens", output_tokens},
              {"request_throughput", ok / duration},
              {"output_throughput", output_tokens / duration},
              {"mean_ttft_ms", mean(ttft)},
              {"median_ttft_ms", percentile(ttft, 50)},
              {"p99_ttft_ms", percentile(ttft, 99)},
              {"mean_tpot_ms", mean(tpot)},
              {"median_tpot_ms", percentile(tpot, 50)},
              {"p99_tpot_ms", percentile(tpot, 99)},
              {"mean_itl_ms", mean(itl)},
              {"median_itl_ms", percentile(itl, 50)},
              {"p99_itl_ms", percentile(itl, 99)},
              {"mean_e2el_ms", mean(e2e)}};
    std::ofstream(o.output_json) << j.dump(2) << "\n";
  }
  return ok == o.num_prompts ? 0 : 1;
}

}  // namespace

Runner add_bench_serve_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "bench-serve",
      "serving benchmark against a running server (vLLM benchmark_serving style): "
      "random token-id prompts, ignore_eos, streamed /v1/completions");
  cmd->add_option("--host", o->host)->capture_default_str();
  cmd->add_option("--port", o->port)->check(CLI::Range(1, 65535))->capture_default_str();
  cmd->add_option("--model", o->model, "model name (default: the first of /v1/models)");
  cmd->add_option("--api-key", o->api_key);
  cmd->add_option("--num-prompts", o->num_prompts)
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--input-len", o->input_len, "prompt tokens")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--output-len", o->output_len, "tokens to generate")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--range-ratio", o->range_ratio, "lengths uniform in len*(1-r)..len*(1+r)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--request-rate", o->request_rate,
                  "requests per second (Poisson); inf = all at once")
      ->capture_default_str();
  cmd->add_option("--max-concurrency", o->max_concurrency, "most requests in flight; 0 = no limit")
      ->check(at_least(0));
  cmd->add_option("--vocab-size", o->vocab_size, "prompt token ids are drawn from [0, vocab-size)")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed)->check(seed_value())->capture_default_str();
  cmd->add_option("--output-json", o->output_json, "also write the results here");
  return [o] {
    KS_CHECK(o->request_rate > 0, "--request-rate must be > 0 (or inf)");
    return run(*o);
  };
}

}  // namespace kestrel::cli
