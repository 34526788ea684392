#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kestrel::server {
namespace {

// vLLM's buckets, with finer ones at the low end of inter-token latency for GPUs.
const std::vector<double> kTtftBounds = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                         0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                         20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kItlBounds = {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075,
                                        0.1,   0.15,   0.2,   0.3,    0.4,  0.5,   0.75, 1.0,
                                        2.5,   5.0,    7.5,   10.0,   20.0, 40.0,  80.0};
const std::vector<double> kE2eBounds = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                        5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                        60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

// Prometheus label values escape backslash, quote and newline.
std::string escape_label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

class Writer {
 public:
  explicit Writer(const std::string& model)
      : label_("model_name=\"" + escape_label(model) + "\"") {}

  void header(const std::string& name, const std::string& type, const std::string& help) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void sample(const std::string& name, double value, const std::string& extra_labels = "") {
    out_ += fmt::format("{}{{{}{}}} {}\n", name, label_,
                        extra_labels.empty() ? "" : "," + extra_labels, number(value));
  }
  void gauge(const std::string& name, const std::string& help, double value) {
    header(name, "gauge", help);
    sample(name, value);
  }
  void counter(const std::string& name, const std::string& help, double value) {
    header(name, "counter", help);
    sample(name, value);
  }
  void histogram(const std::string& name, const std::string& help, const Histogram& h) {
    header(name, "histogram", help);
    const std::vector<uint64_t> counts = h.counts();
    for (size_t i = 0; i < h.bounds().size(); ++i) {
      sample(name + "_bucket", double(counts[i]), "le=\"" + number(h.bounds()[i]) + "\"");
    }
    sample(name + "_bucket", double(h.count()), "le=\"+Inf\"");
    sample(name + "_sum", h.sum());
    sample(name + "_count", double(h.count()));
  }
  std::string take() { return std::move(out_); }

 private:
  std::string label_;
  std::string out_;
};

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), per_bucket_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  ++per_bucket_[i];
  ++count_;
  sum_ += value;
}

std::vector<uint64_t> Histogram::counts() const {
  std::vector<uint64_t> out(bounds_.size());
  uint64_t running = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    running += per_bucket_[i];
    out[i] = running;
  }
  return out;
}

ServerMetrics::ServerMetrics() : ttft_(kTtftBounds), itl_(kItlBounds), e2e_(kE2eBounds) {
  for (const char* reason : {"stop", "length", "abort", "error"}) finished_[reason] = 0;
}

void ServerMetrics::observe_time_to_first_token(double seconds) {
  std::lock_guard lock(mu_);
  ttft_.observe(seconds);
}

void ServerMetrics::observe_inter_token_latency(double seconds) {
  std::lock_guard lock(mu_);
  itl_.observe(seconds);
}

void ServerMetrics::observe_e2e_latency(double seconds) {
  std::lock_guard lock(mu_);
  e2e_.observe(seconds);
}

void ServerMetrics::count_finished(const std::string& reason) {
  std::lock_guard lock(mu_);
  ++finished_[reason];
}

std::string ServerMetrics::render(const LLMStats& s, const std::string& model_name) const {
  Writer w(model_name);
  w.gauge("kestrel:num_requests_running", "Sequences in the running batch.", s.num_running);
  w.gauge("kestrel:num_requests_waiting", "Sequences waiting to be scheduled.", s.num_waiting);
  w.gauge("kestrel:kv_cache_usage_perc", "Fraction of KV cache blocks in use (0 to 1).",
          s.kv_cache_usage);
  w.gauge("kestrel:kv_cache_num_blocks", "KV cache blocks allocated.", s.num_kv_blocks);
  w.gauge("kestrel:kv_cache_used_blocks", "KV cache blocks held by sequences.",
          s.num_kv_blocks - s.num_free_kv_blocks);
  w.counter("kestrel:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
            double(s.prefix_cache_queries));
  w.counter("kestrel:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
            double(s.prefix_cache_hits));
  w.gauge("kestrel:prefix_cache_hit_rate", "Prefix cache hits over queries, in tokens (0 to 1).",
          s.prefix_cache_hit_rate);
  w.counter("kestrel:num_preemptions_total", "Sequences preempted (recomputed later).",
            double(s.num_preemptions));
  w.counter("kestrel:engine_steps_total", "Engine steps (forward passes) run.", double(s.num_steps));
  w.counter("kestrel:engine_overlapped_steps_total",
            "Steps launched while the step before was still on the device (async scheduling).",
            double(s.num_overlapped_steps));
  w.counter("kestrel:prompt_tokens_total", "Prompt tokens of the requests added.",
            double(s.prompt_tokens));
  w.counter("kestrel:generation_tokens_total", "Tokens generated.",
            double(s.generation_tokens));
  std::lock_guard lock(mu_);
  w.header("kestrel:request_success_total", "counter", "Requests finished, by finish reason.");
  for (const auto& [reason, count] : finished_) {
    w.sample("kestrel:request_success_total", double(count),
             "finished_reason=\"" + escape_label(reason) + "\"");
  }
  w.histogram("kestrel:time_to_first_token_seconds",
              "Time from the HTTP request to the first generated token.", ttft_);
  w.histogram("kestrel:inter_token_latency_seconds",
              "Time between two steps that gave a request tokens.", itl_);
  w.histogram("kestrel:e2e_request_latency_seconds",
              "Time from the HTTP request to its last token (finished requests).", e2e_);
  return w.take();
}

}  // namespace kestrel::server
