// Reasoning content end to end: the openai npm client against `kestrel serve
// --reasoning-parser qwen3` on the CPU. reasoning.mjs shapes whole answers, tags included,
// with a guided regex (so the server constrains the thinking too:
// --structured-outputs-in-reasoning); reasoning_gate.mjs checks the default, structured
// outputs that hold the answer after the thinking.
#include "server_harness.h"

namespace kestrel::server_test {
namespace {

TEST(ReasoningClient, ThinkTagsSplitIntoReasoningContent) {
  ServerProcess server({"--reasoning-parser", "qwen3", "--structured-outputs-in-reasoning"});
  const NodeResult r = run_node("reasoning.mjs", server.port(), {}, 120s);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("OK"), std::string::npos) << r.output;
}

TEST(ReasoningClient, StructuredOutputsConstrainTheAnswerAfterTheThinking) {
  ServerProcess server({"--reasoning-parser", "qwen3"});
  const NodeResult r = run_node("reasoning_gate.mjs", server.port(), {}, 180s);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("OK"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kestrel::server_test
