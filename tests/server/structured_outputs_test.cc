// Structured outputs end to end: the openai npm client against `kestrel serve` on the CPU
// (tests/server/structured_outputs.mjs); outputs checked with ajv and JavaScript's RegExp.
#include "server_harness.h"

namespace kestrel::server_test {
namespace {

TEST(StructuredOutputs, SampledRequestsValidateAgainstTheSchema) {
  ServerProcess server;
  const NodeResult r = run_node("structured_outputs.mjs", server.port(), {}, 540s);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("OK"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kestrel::server_test
