// Prometheus metrics of the server (GET /metrics, text exposition format 0.0.4).
//
// Names follow vLLM's with a "kestrel:" prefix, so dashboards carry over:
//   kestrel:num_requests_running / _waiting     gauges (sequences; n > 1 counts each sample)
//   kestrel:kv_cache_usage_perc                  gauge, fraction of KV blocks in use [0, 1]
//   kestrel:kv_cache_num_blocks / _used_blocks   gauges
//   kestrel:prefix_cache_queries_total / _hits_total (tokens), kestrel:prefix_cache_hit_rate
//   kestrel:num_preemptions_total
//   kestrel:prompt_tokens_total / kestrel:generation_tokens_total   counters
//   kestrel:request_success_total{finished_reason="stop|length|abort|error"}
//   kestrel:time_to_first_token_seconds, kestrel:inter_token_latency_seconds,
//   kestrel:e2e_request_latency_seconds          histograms
// Every sample carries the label model_name="<served model name>".
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kestrel/llm_stats.h"

namespace kestrel::server {

// A Prometheus histogram: cumulative counts per upper bound, plus +Inf, sum and count.
class Histogram {
 public:
  // `bounds`: increasing upper bounds of the buckets (seconds here).
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  const std::vector<double>& bounds() const { return bounds_; }
  // counts()[i]: observations <= bounds()[i] (cumulative); count(): all of them.
  std::vector<uint64_t> counts() const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> per_bucket_;  // not cumulative; last entry is (last bound, +Inf)
  uint64_t count_ = 0;
  double sum_ = 0.0;
};

class ServerMetrics {
 public:
  ServerMetrics();

  void observe_time_to_first_token(double seconds);
  void observe_inter_token_latency(double seconds);
  void observe_e2e_latency(double seconds);
  // A request finished ("stop", "length", "abort", "error").
  void count_finished(const std::string& reason);

  // The exposition text: the engine's counters from `stats` plus the server's own.
  std::string render(const LLMStats& stats, const std::string& model_name) const;

 private:
  mutable std::mutex mu_;
  Histogram ttft_;
  Histogram itl_;
  Histogram e2e_;
  std::map<std::string, uint64_t> finished_;
};

}  // namespace kestrel::server
