// Pythonic tool calls end to end: the openai npm client against `kestrel serve
// --tool-call-parser pythonic` on the CPU (tests/server/pythonic_tools.mjs); answers shaped
// by a guided regex so that the random test model writes a Python call list.
#include "server_harness.h"

namespace kestrel::server_test {
namespace {

TEST(PythonicTools, CallListsComeBackAsToolCalls) {
  ServerProcess server({"--tool-call-parser", "pythonic"});
  const NodeResult r = run_node("pythonic_tools.mjs", server.port(), {}, 180s);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("OK"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kestrel::server_test
