// The pre-tokenizer regex against HF's own regex engine: for every Unicode code point,
// \p{L}, \p{N} and \s must agree with what HF's Oniguruma answered
// (tests/data/tokenizer/onig_classes.json, tools/tokenizer_unicode_classes.py).
#include "tokenizer/regex.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/utf8.h"

namespace kestrel {
namespace {

std::vector<bool> onig_members(const std::string& cls) {
  static const nlohmann::json dump = [] {
    std::ifstream in(testing::source_path("tests/data/tokenizer/onig_classes.json"));
    return nlohmann::json::parse(in);
  }();
  std::vector<bool> member(0x110000, false);
  for (const auto& r : dump.at("classes").at(cls)) {
    for (int cp = r[0].get<int>(); cp <= r[1].get<int>(); ++cp) member[cp] = true;
  }
  return member;
}

std::vector<std::pair<size_t, size_t>> matches(const Regex& re, std::string_view text) {
  std::vector<std::pair<size_t, size_t>> out;
  re.find_all(text, [&](size_t b, size_t e) { out.emplace_back(b, e); });
  return out;
}

TEST(Regex, ClassesAgreeWithHuggingFaceForEveryCodePoint) {
  const std::vector<bool> letter = onig_members("L"), number = onig_members("N"),
                          space = onig_members("s");
  const Regex re_l("\\p{L}"), re_n("\\p{N}"), re_s("\\s"), re_not_s("\\S"),
      re_rest("[^\\s\\p{L}\\p{N}]");  // the class form Qwen and Llama 3 use
  int mismatches = 0;
  std::string ch;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    ch.clear();
    utf8::append(ch, cp);
    const bool l = !matches(re_l, ch).empty(), n = !matches(re_n, ch).empty(),
               s = !matches(re_s, ch).empty(), not_s = !matches(re_not_s, ch).empty(),
               rest = !matches(re_rest, ch).empty();
    const bool ok = l == letter[cp] && n == number[cp] && s == space[cp] && not_s == !space[cp] &&
                    rest == !(letter[cp] || number[cp] || space[cp]);
    if (!ok && ++mismatches <= 10) {
      ADD_FAILURE() << "U+" << std::hex << uint32_t(cp) << " L " << l << "/" << letter[cp] << " N "
                    << n << "/" << number[cp] << " s " << s << "/" << space[cp];
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Regex, RewritesOnigurumaOnlyEscapes) {
  // \s is spelled out (no U+180E); \h is a hex digit in Oniguruma.
  const std::string p = oniguruma_to_pcre2("\\s+[^\\s\\d]\\h");
  EXPECT_EQ(p.find("\\s"), std::string::npos) << p;
  EXPECT_EQ(p.find("\\h"), std::string::npos) << p;
  const Regex hex("\\h+");
  EXPECT_EQ(matches(hex, "zz09afAFg"), (std::vector<std::pair<size_t, size_t>>{{2, 8}}));
  const Regex literal("a.b", /*literal=*/true);
  EXPECT_EQ(matches(literal, "axb a.b"), (std::vector<std::pair<size_t, size_t>>{{4, 7}}));
}

TEST(Regex, QwenPatternSplitsAsDerivedByHand) {
  const Regex re(
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}"
      "\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+");
  const std::string text = "He's  12 ok!\n\n  x";
  std::vector<std::string> words;
  for (auto [b, e] : matches(re, text)) words.push_back(text.substr(b, e - b));
  // A space run before a digit: "\s+(?!\S)" takes all but the last space, then "\s+" the
  // last one. Before a letter the last space joins the word (" x").
  EXPECT_EQ(words,
            (std::vector<std::string>{"He", "'s", " ", " ", "1", "2", " ok", "!\n\n", " ", " x"}));
}

TEST(Regex, HugeWhitespaceRunDoesNotExhaustTheStack) {
  const Regex re("\\s+(?!\\S)|\\s+");
  const std::string text(4 << 20, ' ');
  EXPECT_EQ(matches(re, text + "x"), (std::vector<std::pair<size_t, size_t>>{
                                         {0, text.size() - 1}, {text.size() - 1, text.size()}}));
}

TEST(Regex, BadPatternThrowsWithPosition) {
  try {
    Regex re("(unclosed");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(unclosed"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kestrel
