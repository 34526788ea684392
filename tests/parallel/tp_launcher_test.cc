// Ranks a launcher starts (mpirun, srun, or by hand): every process runs the same `kestrel`
// command with --tp-rendezvous and its rank in the environment (here KESTREL_TP_*, as a
// launcher's variables would give it). Rank 0 prints HF's greedy tokens; rank 1 serves its
// steps and exits 0 when rank 0 is done.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kestrel {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(LauncherStartedRanks, SameCommandOnEveryRankGivesHfTokens) {
  const fs::path model = fs::path(KESTREL_SOURCE_DIR) / "tests/data/hf/qwen3_tiny";
  const nlohmann::json expected = nlohmann::json::parse(read_file(model / "expected.json"));
  const auto prompt = expected["prompts"][0].get<std::vector<int>>();
  const auto greedy = expected["greedy"][0].get<std::vector<int>>();
  std::string ids, want = "token ids:";
  for (int id : prompt) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  for (int id : greedy) want += " " + std::to_string(id);

  char tmpl[] = "/tmp/kestrel-launcher-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path dir = tmpl;
  const fs::path rendezvous = dir / "rendezvous";
  fs::create_directory(rendezvous);
  const std::string command = std::string(KESTREL_BINARY_DIR) + "/kestrel generate --model " +
                              model.string() + " --device cpu --threads 1 --num-kv-blocks 64 " +
                              "--tp 2 --tp-rendezvous " + rendezvous.string() + " --prompt-ids " +
                              ids + " --temperature 0 --max-tokens 20 --ignore-eos";
  auto rank = [&](int r) {
    return "env KESTREL_TP_RANK=" + std::to_string(r) + " KESTREL_TP_WORLD_SIZE=2 KESTREL_TP_LOCAL_RANK=" +
           std::to_string(r) + " KESTREL_TP_HOST=127.0.0.1 timeout 120 " + command + " >" +
           (dir / ("out" + std::to_string(r))).string() + " 2>&1; echo $? >" +
           (dir / ("rc" + std::to_string(r))).string();
  };
  const std::string script = "(" + rank(1) + ") & " + rank(0) + "; wait";
  ASSERT_EQ(std::system(script.c_str()), 0) << script;

  const std::string out0 = read_file(dir / "out0"), out1 = read_file(dir / "out1");
  EXPECT_EQ(read_file(dir / "rc0"), "0\n") << out0;
  EXPECT_EQ(read_file(dir / "rc1"), "0\n") << out1;
  EXPECT_NE(out0.find(want), std::string::npos) << "rank 0 printed:\n" << out0 << "\nwant: " << want;
  EXPECT_EQ(out1.find("token ids:"), std::string::npos) << "rank 1 must not print results:\n" << out1;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kestrel
