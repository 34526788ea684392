// Reasoning content end to end: the openai npm client against `kestrel serve
// --reasoning-parser qwen3` on the CPU (tests/server/reasoning.mjs); answers shaped by a
// guided regex so that the random test model writes the <think> tags.
#include "server_harness.h"

namespace kestrel::server_test {
namespace {

TEST(ReasoningClient, ThinkTagsSplitIntoReasoningContent) {
  ServerProcess server({"--reasoning-parser", "qwen3"});
  const NodeResult r = run_node("reasoning.mjs", server.port(), {}, 120s);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("OK"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kestrel::server_test
