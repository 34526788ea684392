// Shared by the grammar tests (ebnf_grammar_test.cc, lark_grammar_test.cc): a grammar's DFA,
// the check of a grammar without recursion against an equivalent regex in Python's re, and
// outputs of random token paths through a grammar compiled as a request compiles it.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "structured/byte_dfa.h"
#include "structured/ebnf_grammar.h"
#include "structured_test_util.h"

namespace kestrel::structured::testing {

inline ByteDfa grammar_dfa(const std::string& grammar, int nesting = kGrammarNestings[0]) {
  return ByteDfa::build(EbnfGrammar::parse(grammar).pattern(nesting));
}

// Random strings the DFA accepts, then edits of them (accepted or not).
inline std::vector<std::string> samples(const ByteDfa& dfa, std::mt19937& rng, int n = 60) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    std::string s = walk(dfa, rng);
    if (!s.empty() || dfa.accepting(dfa.start())) out.push_back(std::move(s));
  }
  std::vector<std::string> edits = ascii_edits(out, rng);
  out.insert(out.end(), edits.begin(), edits.end());
  return out;
}

struct RegularCase {
  std::string grammar;
  std::string regex;                 // the same language, for Python's re
  std::vector<std::string> matches;  // written by hand
};

// Each grammar accepts exactly what its regex fullmatches in Python, over samples of the
// grammar's DFA and their edits, and accepts its hand-written matches. `recursive`: whether
// the grammar's rules refer to themselves.
inline void expect_same_language(const std::vector<RegularCase>& cases, std::mt19937& rng,
                                 bool recursive = false) {
  for (const RegularCase& c : cases) {
    SCOPED_TRACE(c.grammar);
    EXPECT_EQ(EbnfGrammar::parse(c.grammar).recursive(), recursive);
    const ByteDfa dfa = grammar_dfa(c.grammar);
    std::vector<std::string> texts = samples(dfa, rng);
    texts.insert(texts.end(), c.matches.begin(), c.matches.end());
    const std::vector<bool> py = python_fullmatch(c.regex, texts);
    ASSERT_EQ(py.size(), texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
      EXPECT_EQ(dfa_accepts(dfa, texts[i]), py[i]) << kestrel::testing::escaped(texts[i]);
    }
    for (const std::string& m : c.matches) EXPECT_TRUE(dfa_accepts(dfa, m)) << m;
  }
}

// The texts of up to `n` random token paths (of at most 300 tokens) through `grammar`,
// compiled over Qwen3's vocabulary.
inline std::vector<std::string> grammar_outputs(const std::string& grammar, int n, unsigned seed) {
  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kGrammar;
  spec.grammar = grammar;
  const auto g = qwen3_compiler().compile(spec);
  std::mt19937 rng(seed);
  std::vector<std::string> texts;
  for (int i = 0; i < n; ++i) {
    if (auto tokens = random_walk(*g, rng, 300)) texts.push_back(qwen3().decode(*tokens));
  }
  return texts;
}

// Each grammar fails to parse with an Error whose message holds the words paired with it.
inline void expect_parse_errors(const std::vector<std::pair<std::string, std::string>>& bad) {
  for (const auto& [grammar, words] : bad) {
    try {
      EbnfGrammar::parse(grammar);
      ADD_FAILURE() << grammar << " parsed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << grammar << ": " << e.what();
    }
  }
}

}  // namespace kestrel::structured::testing
