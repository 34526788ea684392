// The byte DFA of a regex against Python's re.fullmatch: every string the DFA accepts
// (random walks and edits of them) must match in Python, and hand-written matches must be
// accepted; unsupported syntax is an error naming it.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "structured/byte_dfa.h"
#include "structured/regex_parser.h"
#include "structured_test_util.h"

namespace kestrel::structured {
namespace {

using testing::dfa_accepts;
using testing::walk;

struct Case {
  std::string pattern;
  std::vector<std::string> matches;  // must be accepted
};

TEST(RegexDfa, AgreesWithPythonRe) {
  const std::vector<Case> cases = {
      {"[0-9]{3}-[0-9]{4}", {"555-1234"}},
      {"(cat|dog|bird)s?", {"cat", "dogs", "bird"}},
      {"^\\d+(\\.\\d{1,2})?$", {"0", "12.5", "3.14"}},
      {"[A-Za-z_][A-Za-z0-9_]*", {"_x1", "Hello"}},
      {"\\w+@\\w+\\.(com|org)", {"a@b.com"}},
      {"[^a-z\\s]{2,5}", {"AB", "12!?"}},
      {"(?:ab)*c+", {"c", "ababccc"}},
      {"(?P<year>\\d{4})-(?P<m>\\d\\d)", {"2026-11"}},
      {"héllo|日本語|😀+", {"héllo", "日本語", "😀😀"}},
      {"[à-ÿ]{1,3}\\u00e9", {"àé", "ÿÿÿé"}},
      {"a.c", {"abc", "a€c", "a😀c"}},
      {"\\S\\s\\D\\W", {"x a!"}},
      {"x{0}y{2,}z{1,2}?", {"yyz", "yyyzz"}},
      {"[-+]?[0-9]*\\.?[0-9]+([eE][-+]?[0-9]+)?", {"-1.5e10", ".5", "42"}},
      {"\\(\\)\\[\\]\\{\\}\\|\\.\\*\\+\\?\\\\", {"()[]{}|.*+?\\"}},
      {"[\\]\\-a]+", {"]-a"}},
      {"(a|)b", {"b", "ab"}},
  };
  std::mt19937 rng(17);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.pattern);
    const ByteDfa dfa = ByteDfa::build(parse_regex(c.pattern));
    std::vector<std::string> accepted;
    for (int i = 0; i < 60; ++i) {
      std::string s = walk(dfa, rng);
      if (!s.empty() || dfa.accepting(dfa.start())) accepted.push_back(s);
    }
    // Edits of accepted strings that the DFA still accepts.
    for (std::string& s : testing::ascii_edits(accepted, rng)) {
      if (dfa_accepts(dfa, s)) accepted.push_back(std::move(s));
    }
    for (const std::string& m : c.matches) {
      EXPECT_TRUE(dfa_accepts(dfa, m)) << m;
      accepted.push_back(m);
    }
    const std::vector<bool> py = testing::python_fullmatch(c.pattern, accepted);
    ASSERT_EQ(py.size(), accepted.size());
    for (size_t i = 0; i < accepted.size(); ++i) {
      EXPECT_TRUE(py[i]) << "accepted but Python's re does not match: " << kestrel::testing::escaped(accepted[i]);
    }
  }
}

TEST(RegexDfa, RejectsWhatDoesNotMatch) {
  const ByteDfa dfa = ByteDfa::build(parse_regex("[0-9]{3}-[0-9]{4}"));
  for (const char* s : {"", "555-123", "555-12345", "5551234", "a55-1234"}) {
    EXPECT_FALSE(dfa_accepts(dfa, s)) << s;
  }
  const ByteDfa any = ByteDfa::build(parse_regex("."));
  EXPECT_FALSE(dfa_accepts(any, "\n"));
  EXPECT_FALSE(dfa_accepts(any, "\xC0\x80"));      // overlong NUL
  EXPECT_FALSE(dfa_accepts(any, "\xED\xA0\x80"));  // a surrogate
  EXPECT_FALSE(dfa_accepts(any, "\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_TRUE(dfa_accepts(any, "\xF4\x8F\xBF\xBF"));   // U+10FFFF
}

// Every code point of a class, and only those, through the UTF-8 sequences: checked
// against a plain encoder on a sample of the whole range.
TEST(RegexDfa, Utf8ClassesCoverExactlyTheirCodePoints) {
  auto encode = [](uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
      s += char(cp);
    } else if (cp < 0x800) {
      s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += char(0xE0 | (cp >> 12)), s += char(0x80 | ((cp >> 6) & 0x3F)), s += char(0x80 | (cp & 0x3F));
    } else {
      s += char(0xF0 | (cp >> 18)), s += char(0x80 | ((cp >> 12) & 0x3F));
      s += char(0x80 | ((cp >> 6) & 0x3F)), s += char(0x80 | (cp & 0x3F));
    }
    return s;
  };
  const std::vector<CodeRange> ranges = {{0x41, 0x5A}, {0x7F, 0x801}, {0xD000, 0xE010}, {0xFFFF, 0x10010}, {0x10FFF0, 0x10FFFF}};
  const ByteDfa dfa = ByteDfa::build(class_of(ranges));
  for (uint32_t cp = 0; cp <= kMaxCodePoint; cp += (cp < 0x11000 ? 1 : 97)) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    bool in = false;
    for (auto [lo, hi] : ranges) in = in || (cp >= lo && cp <= hi);
    ASSERT_EQ(dfa_accepts(dfa, encode(cp)), in) << std::hex << cp;
  }
}

TEST(RegexDfa, UnsupportedSyntaxIsNamed) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"(?=a)b", "lookahead"},      {"(a)\\1", "backreferences"}, {"\\bword", "word boundaries"},
      {"(?i)abc", "inline flags"},  {"a++", "possessive"},        {"(ab", "missing ')'"},
      {"a{2,1}", "m < n"},          {"*a", "nothing to repeat"},  {"a^b", "anchors"},
      {"[z-a]", "out of order"},    {"a{5000}", "above 1000"},
  };
  for (const auto& [pattern, words] : bad) {
    try {
      parse_regex(pattern);
      ADD_FAILURE() << pattern << " parsed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << pattern << ": " << e.what();
    }
  }
  EXPECT_THROW(ByteDfa::build(parse_regex("[^\\x00-\\u{10FFFF}]")), Error);
}

TEST(RegexDfa, StateLimitIsAnError) {
  // (a|b)*a(a|b){12}: a DFA needs 2^13 states to remember the last 13 letters.
  EXPECT_THROW(ByteDfa::build(parse_regex("(a|b)*a(a|b){12}"), 1000), Error);
}

}  // namespace
}  // namespace kestrel::structured
