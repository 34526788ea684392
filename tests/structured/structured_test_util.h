// Shared by the structured-output tests: the real Qwen3 vocabulary as a trie, random walks
// through a grammar's token masks, and the outside oracles (Python's re and json, Node's
// JSON.parse with the ajv validator) run as child processes.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "../tokenizer/test_util.h"
#include "structured/grammar_compiler.h"

namespace kestrel::structured::testing {

using kestrel::testing::qwen3;
using kestrel::testing::source_path;

// Qwen3-0.6B's vocabulary size (the model's LM head has more rows than the tokenizer ids).
constexpr int kModelVocab = 151936;

inline std::shared_ptr<const VocabTrie> qwen3_trie() {
  static const auto trie = std::make_shared<const VocabTrie>(VocabTrie::from_tokenizer(qwen3(), kModelVocab));
  return trie;
}

inline GrammarCompiler& qwen3_compiler() {
  static GrammarCompiler compiler(qwen3_trie());
  return compiler;
}

// Whether the DFA accepts all of `s`.
inline bool dfa_accepts(const ByteDfa& dfa, const std::string& s) {
  int32_t state = dfa.start();
  for (char c : s) {
    state = dfa.next(state, static_cast<uint8_t>(c));
    if (state == ByteDfa::kDead) return false;
  }
  return dfa.accepting(state);
}

// A random string the DFA accepts: random live bytes, ending at an accepting state with
// probability 0.3 (or when nothing else is possible). Empty when it passes 400 bytes.
inline std::string walk(const ByteDfa& dfa, std::mt19937& rng) {
  std::string s;
  int32_t state = dfa.start();
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int i = 0; i < 400; ++i) {
    std::vector<int> bytes;
    for (int b = 0; b < 256; ++b) {
      if (dfa.next(state, uint8_t(b)) != ByteDfa::kDead) bytes.push_back(b);
    }
    if (dfa.accepting(state) && (bytes.empty() || u(rng) < 0.3)) return s;
    const int b = bytes[std::uniform_int_distribution<size_t>(0, bytes.size() - 1)(rng)];
    s.push_back(static_cast<char>(b));
    state = dfa.next(state, uint8_t(b));
  }
  return {};  // too long: the caller skips it
}

// Each non-empty string of `strings` with one of its ASCII bytes replaced by a random
// printable one (so the edit stays UTF-8), where the byte drawn is ASCII.
inline std::vector<std::string> ascii_edits(const std::vector<std::string>& strings, std::mt19937& rng) {
  std::vector<std::string> out;
  for (std::string s : strings) {
    if (s.empty()) continue;
    const size_t at = std::uniform_int_distribution<size_t>(0, s.size() - 1)(rng);
    if (static_cast<unsigned char>(s[at]) >= 0x80) continue;
    s[at] = static_cast<char>(std::uniform_int_distribution<int>(0x20, 0x7E)(rng));
    out.push_back(std::move(s));
  }
  return out;
}

inline bool allowed(std::span<const uint32_t> mask, int id) {
  return static_cast<size_t>(id >> 5) < mask.size() && (mask[id >> 5] >> (id & 31) & 1u);
}

// A random path through the grammar: at each step a token drawn uniformly from the allowed
// ones (or, half of the time, from the allowed single-byte ones, so that free strings end
// in reasonable time); at a state that may end, it ends with probability `end_p`. Returns
// the tokens, or nullopt when max_steps pass first.
inline std::optional<std::vector<int>> random_walk(const Grammar& grammar, std::mt19937& rng,
                                                   int max_steps = 2000, double end_p = 0.3) {
  std::unique_ptr<TokenConstraint> m = grammar.start();
  std::vector<int> tokens;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int step = 0; step < max_steps; ++step) {
    if (m->can_end() && u(rng) < end_p) return tokens;
    const std::span<const uint32_t> mask = m->allowed_tokens();
    std::vector<int> all, single;
    for (size_t w = 0; w < mask.size(); ++w) {
      for (uint32_t bits = mask[w]; bits != 0; bits &= bits - 1) {
        const int id = static_cast<int>(w * 32 + std::countr_zero(bits));
        all.push_back(id);
        if (grammar.vocab().bytes(id).size() == 1) single.push_back(id);
      }
    }
    if (all.empty()) return m->can_end() ? std::optional(tokens) : std::nullopt;
    const std::vector<int>& from = !single.empty() && u(rng) < 0.5 ? single : all;
    const int id = from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng)];
    tokens.push_back(id);
    m->accept(id);
  }
  return std::nullopt;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// Runs `command` with `input` written to a temporary file given as its last argument;
// returns its standard output.
inline std::string run_with_input(const std::string& command, const std::string& input) {
  char path[] = "/tmp/kestrel_structured_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  FILE* f = fdopen(fd, "w");
  fwrite(input.data(), 1, input.size(), f);
  fclose(f);
  std::string out;
  FILE* p = popen((command + " " + path).c_str(), "r");
  if (p == nullptr) throw std::runtime_error("popen failed: " + command);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int rc = pclose(p);
  std::remove(path);
  if (rc != 0) throw std::runtime_error(command + " failed (" + std::to_string(rc) + "): " + out);
  return out;
}

// Runs a Python script that reads the JSON object `input` from the file named by sys.argv[1]
// and prints a JSON list of one bool per text.
inline std::vector<bool> python_bools(const std::string& script, const nlohmann::json& input) {
  const std::string out = run_with_input("python3 -c \"" + script + "\"", input.dump());
  return nlohmann::json::parse(out).get<std::vector<bool>>();
}

// For each text: does Python's re.fullmatch(pattern, text) match? One bool per text.
inline std::vector<bool> python_fullmatch(const std::string& pattern, const std::vector<std::string>& texts) {
  return python_bools(
      "import json, re, sys\n"
      "d = json.load(open(sys.argv[1], encoding='utf-8'))\n"
      "r = re.compile(d['pattern'])\n"
      "print(json.dumps([r.fullmatch(t) is not None for t in d['texts']]))\n",
      {{"pattern", pattern}, {"texts", texts}});
}

// For each text: whether Python's `predicate` (the source of a function of one str, which
// may call parses(f, t): f(t) raises nothing) holds for it. One bool per text.
inline std::vector<bool> python_predicate(const std::string& predicate, const std::vector<std::string>& texts) {
  return python_bools(
      "import ast, json, re, sys\n"
      "def parses(f, t):\n"
      "    try:\n"
      "        f(t)\n"
      "        return True\n"
      "    except Exception:\n"
      "        return False\n"
      "d = json.load(open(sys.argv[1], encoding='utf-8'))\n"
      "f = eval(d['predicate'])\n"
      "print(json.dumps([bool(f(t)) for t in d['texts']]))\n",
      {{"predicate", predicate}, {"texts", texts}});
}

// For each text: the empty string when JSON.parse reads it and ajv (strict mode off, all
// errors) finds it valid under `schema`, else what failed.
inline std::vector<std::string> ajv_errors(const nlohmann::ordered_json& schema,
                                           const std::vector<std::string>& texts) {
  const std::string cmd = "NODE_PATH=" + source_path("third_party/npm/node_modules") + " node " +
                          source_path("tests/structured/ajv_validate.cjs");
  const std::string out =
      run_with_input(cmd, nlohmann::ordered_json{{"schema", schema}, {"texts", texts}}.dump());
  return nlohmann::json::parse(out).get<std::vector<std::string>>();
}

}  // namespace kestrel::structured::testing
