// The HF fixtures of tests/data/hf (tools/make_hf_fixture.py): tiny random models with HF's
// fp32 logits and greedy continuations in expected.json.
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace kestrel::test {

inline std::filesystem::path fixture_root() {
  return std::filesystem::path(KESTREL_SOURCE_DIR) / "tests" / "data" / "hf";
}

// Folder names of the fixtures, sorted.
inline std::vector<std::string> fixture_models() {
  std::vector<std::string> names;
  if (!std::filesystem::is_directory(fixture_root())) return names;
  for (const auto& e : std::filesystem::directory_iterator(fixture_root())) {
    if (e.is_directory() && std::filesystem::exists(e.path() / "expected.json")) {
      names.push_back(e.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace kestrel::test
