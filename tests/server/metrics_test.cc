// The Prometheus text of ServerMetrics, against hand-derived values.
#include "server/metrics.h"

#include <gtest/gtest.h>

namespace kestrel::server {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

TEST(Histogram, CumulativeBucketsSumAndCount) {
  Histogram h({0.1, 1.0, 10.0});
  for (double v : {0.05, 0.1, 0.5, 3.0, 20.0}) h.observe(v);
  // <= 0.1: 0.05 and 0.1 (bounds are inclusive); <= 1: + 0.5; <= 10: + 3; +Inf: + 20.
  EXPECT_EQ(h.counts(), (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(h.count(), 5u);
  EXPECT_DOUBLE_EQ(h.sum(), 23.65);
}

TEST(ServerMetrics, RendersEngineCountersAndHistograms) {
  ServerMetrics m;
  m.observe_time_to_first_token(0.003);
  m.observe_time_to_first_token(0.02);
  m.observe_inter_token_latency(0.03);
  m.observe_e2e_latency(1.2);
  m.count_finished("length");
  m.count_finished("length");
  m.count_finished("abort");
  LLMStats s;
  s.num_kv_blocks = 100;
  s.num_running = 3;
  s.num_waiting = 1;
  s.num_free_kv_blocks = 90;
  s.kv_cache_usage = 0.1;
  s.prefix_cache_queries = 200;
  s.prefix_cache_hits = 50;
  s.prefix_cache_hit_rate = 0.25;
  s.prompt_tokens = 1234;
  s.generation_tokens = 567;
  s.num_steps = 40;
  s.num_overlapped_steps = 31;
  const std::string text = m.render(s, "my-model");
  const std::string l = "{model_name=\"my-model\"";
  EXPECT_TRUE(has_line(text, "kestrel:num_requests_running" + l + "} 3")) << text;
  EXPECT_TRUE(has_line(text, "kestrel:num_requests_waiting" + l + "} 1"));
  EXPECT_TRUE(has_line(text, "kestrel:kv_cache_usage_perc" + l + "} 0.1"));
  EXPECT_TRUE(has_line(text, "kestrel:kv_cache_num_blocks" + l + "} 100"));
  EXPECT_TRUE(has_line(text, "kestrel:kv_cache_used_blocks" + l + "} 10"));
  EXPECT_TRUE(has_line(text, "kestrel:prefix_cache_queries_total" + l + "} 200"));
  EXPECT_TRUE(has_line(text, "kestrel:prefix_cache_hits_total" + l + "} 50"));
  EXPECT_TRUE(has_line(text, "kestrel:prefix_cache_hit_rate" + l + "} 0.25"));
  EXPECT_TRUE(has_line(text, "kestrel:prompt_tokens_total" + l + "} 1234"));
  EXPECT_TRUE(has_line(text, "kestrel:generation_tokens_total" + l + "} 567"));
  EXPECT_TRUE(has_line(text, "kestrel:engine_steps_total" + l + "} 40"));
  EXPECT_TRUE(has_line(text, "kestrel:engine_overlapped_steps_total" + l + "} 31"));
  EXPECT_TRUE(
      has_line(text, "kestrel:request_success_total" + l + ",finished_reason=\"length\"} 2"));
  EXPECT_TRUE(
      has_line(text, "kestrel:request_success_total" + l + ",finished_reason=\"abort\"} 1"));
  EXPECT_TRUE(has_line(text, "kestrel:request_success_total" + l + ",finished_reason=\"stop\"} 0"));
  // TTFT 0.003 and 0.02: none <= 0.001, one <= 0.005, both <= 0.02.
  EXPECT_TRUE(
      has_line(text, "kestrel:time_to_first_token_seconds_bucket" + l + ",le=\"0.001\"} 0"));
  EXPECT_TRUE(
      has_line(text, "kestrel:time_to_first_token_seconds_bucket" + l + ",le=\"0.005\"} 1"));
  EXPECT_TRUE(has_line(text, "kestrel:time_to_first_token_seconds_bucket" + l + ",le=\"0.02\"} 2"));
  EXPECT_TRUE(has_line(text, "kestrel:time_to_first_token_seconds_bucket" + l + ",le=\"+Inf\"} 2"));
  EXPECT_TRUE(has_line(text, "kestrel:time_to_first_token_seconds_count" + l + "} 2"));
  EXPECT_TRUE(has_line(text, "kestrel:time_to_first_token_seconds_sum" + l + "} 0.023"));
  EXPECT_TRUE(has_line(text, "kestrel:inter_token_latency_seconds_count" + l + "} 1"));
  EXPECT_TRUE(has_line(text, "kestrel:e2e_request_latency_seconds_bucket" + l + ",le=\"1\"} 0"));
  EXPECT_TRUE(has_line(text, "kestrel:e2e_request_latency_seconds_bucket" + l + ",le=\"1.5\"} 1"));
  EXPECT_TRUE(has_line(text, "# TYPE kestrel:time_to_first_token_seconds histogram"));
  EXPECT_TRUE(has_line(text, "# TYPE kestrel:prompt_tokens_total counter"));
  EXPECT_TRUE(has_line(text, "# TYPE kestrel:num_requests_running gauge"));
}

TEST(ServerMetrics, EscapesTheModelNameLabel) {
  ServerMetrics m;
  LLMStats s;
  s.num_kv_blocks = 1;
  const std::string text = m.render(s, "a\"b\\c");
  EXPECT_NE(text.find("model_name=\"a\\\"b\\\\c\""), std::string::npos) << text;
}

}  // namespace
}  // namespace kestrel::server
