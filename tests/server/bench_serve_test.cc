// kestrel bench-serve against kestrel serve: every request succeeds, and the token counts
// it reports are what the server's /metrics counted.
#include <fstream>

#include "server_harness.h"

namespace kestrel::server_test {
namespace {

using json = nlohmann::json;

TEST(BenchServe, ReportsWhatTheServerCounted) {
  ServerProcess server;
  const std::string before = get_metrics(server.port());
  const std::string out =
      std::string(KESTREL_BINARY_DIR) + "/bench_serve_" + std::to_string(getpid()) + ".json";
  Child bench({std::string(KESTREL_BINARY_DIR) + "/kestrel",
               "bench-serve",
               "--port",
               std::to_string(server.port()),
               "--api-key",
               kApiKey,
               "--num-prompts",
               "12",
               "--input-len",
               "16",
               "--output-len",
               "8",
               "--request-rate",
               "40",
               "--vocab-size",
               "150000",
               "--seed",
               "3",
               "--output-json",
               out},
              child_env());
  const std::optional<int> code = bench.wait(60s);
  ASSERT_TRUE(code.has_value()) << bench.output();
  EXPECT_EQ(*code, 0) << bench.output();
  EXPECT_NE(bench.output().find("Successful requests:                     12"), std::string::npos)
      << bench.output();

  std::ifstream in(out);
  const json r = json::parse(in, nullptr, false);
  fs::remove(out);
  ASSERT_FALSE(r.is_discarded());
  EXPECT_EQ(r["completed"], 12);
  EXPECT_EQ(r["failed"], 0);
  EXPECT_EQ(r["total_input_tokens"], 12 * 16);
  EXPECT_EQ(r["total_output_tokens"], 12 * 8);
  EXPECT_GT(r["mean_ttft_ms"].get<double>(), 0.0);
  EXPECT_GT(r["mean_itl_ms"].get<double>(), 0.0);
  EXPECT_GE(r["p99_ttft_ms"].get<double>(), r["median_ttft_ms"].get<double>());

  // The server saw the 12 requests plus bench-serve's warm-up (4 prompt tokens, 2 new).
  const std::string after = get_metrics(server.port());
  auto delta = [&](const std::string& name) {
    return *metric(after, name) - *metric(before, name);
  };
  EXPECT_EQ(delta("kestrel:prompt_tokens_total"), 12 * 16 + 4);
  EXPECT_EQ(delta("kestrel:generation_tokens_total"), 12 * 8 + 2);
}

}  // namespace
}  // namespace kestrel::server_test
