// Structured outputs end to end: the openai npm client against `kestrel serve` on the CPU
// (tests/server/structured_outputs.mjs, tool_choice.mjs, mixed_load.mjs); outputs checked
// with ajv and JavaScript's RegExp.
#include "server_harness.h"

namespace kestrel::server_test {
namespace {

TEST(StructuredOutputs, SampledRequestsValidateAgainstTheSchema) {
  ServerProcess server;
  const NodeResult r = run_node("structured_outputs.mjs", server.port(), {}, 540s);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("OK"), std::string::npos) << r.output;
}

// tool_choice "required" and named functions: sampling constrained to Hermes tool calls
// (tests/server/tool_choice.mjs).
TEST(StructuredOutputs, ForcedToolCallsAreValidCalls) {
  ServerProcess server({"--tool-call-parser", "hermes"});
  const NodeResult r = run_node("tool_choice.mjs", server.port(), {}, 300s);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("OK"), std::string::npos) << r.output;
}

// The same through Mistral's markup ("[TOOL_CALLS][" calls joined by ", " "]"), which the
// constraint writes and the mistral parser reads back.
TEST(StructuredOutputs, ForcedToolCallsAreValidCallsInMistralsMarkup) {
  ServerProcess server({"--tool-call-parser", "mistral"});
  const NodeResult r = run_node("tool_choice.mjs", server.port(), {{"TOOL_MARKUP", "mistral"}}, 300s);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("OK"), std::string::npos) << r.output;
}

// Plain, structured and forced-tool-call requests, 200 at once, each equal to its answer
// alone (tests/server/mixed_load.mjs).
TEST(StructuredOutputs, MixedLoadEqualsRequestsAlone) {
  ServerProcess server({"--tool-call-parser", "hermes"});
  const NodeResult r = run_node("mixed_load.mjs", server.port(), {}, 300s);
  EXPECT_EQ(r.exit_code, 0) << r.output.substr(0, 8000);
  EXPECT_NE(r.output.find("OK"), std::string::npos) << r.output.substr(0, 8000);
}

}  // namespace
}  // namespace kestrel::server_test
