// The official openai npm client against `kestrel serve` (tests/server/openai_client.mjs).
#include "server_harness.h"

namespace kestrel::server_test {
namespace {

TEST(OpenAIClient, CompletionsChatStreamingUsageStopLogprobsErrors) {
  ServerProcess server;
  const NodeResult r = run_node("openai_client.mjs", server.port());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("OK"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kestrel::server_test
