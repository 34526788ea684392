#include "structured/regex_parser.h"

#include <cctype>
#include <string>

#include "core/error.h"
#include "structured/utf8_sequences.h"

namespace kestrel::structured {
namespace {

constexpr int kMaxCount = 1000;

std::vector<CodeRange> digit_ranges() { return {{'0', '9'}}; }
std::vector<CodeRange> word_ranges() { return {{'0', '9'}, {'A', 'Z'}, {'a', 'z'}, {'_', '_'}}; }
std::vector<CodeRange> space_ranges() { return {{'\t', '\r'}, {' ', ' '}}; }
// Every code point Python's (str.isspace) or ECMAScript's \s counts as space: excluded from
// \S so that \S never matches what either calls space.
std::vector<CodeRange> unicode_space_ranges() {
  return {{'\t', '\r'},      {0x1C, 0x1F},     {' ', ' '},       {0x85, 0x85},
          {0xA0, 0xA0},      {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
          {0x202F, 0x202F},  {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
}
std::vector<CodeRange> non_ascii() { return {{0x80, kMaxCodePoint}}; }
std::vector<CodeRange> plus(std::vector<CodeRange> a, const std::vector<CodeRange>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}

  RegexNode parse() {
    if (peek_is('^')) ++pos_;
    RegexNode n = parse_alt();
    if (pos_ < p_.size()) fail("unbalanced ')'");
    return n;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw_error("regex: {} at offset {} of '{}'", what, pos_, p_);
  }
  bool peek_is(char c) const { return pos_ < p_.size() && p_[pos_] == c; }
  bool at_end_anchor() const { return peek_is('$') && pos_ + 1 == p_.size(); }

  // The next code point (UTF-8), consumed.
  uint32_t next_code_point() {
    if (pos_ >= p_.size()) fail("unexpected end");
    uint32_t cp = 0;
    const int len = decode_utf8(p_, pos_, cp);
    if (len == 0) fail("invalid UTF-8");
    pos_ += len;
    return cp;
  }

  RegexNode parse_alt() {
    std::vector<RegexNode> options{parse_concat()};
    while (peek_is('|')) {
      ++pos_;
      options.push_back(parse_concat());
    }
    return alt(std::move(options));
  }

  RegexNode parse_concat() {
    std::vector<RegexNode> parts;
    while (pos_ < p_.size() && !peek_is('|') && !peek_is(')')) {
      if (at_end_anchor()) {
        ++pos_;
        break;
      }
      parts.push_back(parse_repeat());
    }
    return concat(std::move(parts));
  }

  int parse_int() {
    const size_t start = pos_;
    long v = 0;
    while (pos_ < p_.size() && p_[pos_] >= '0' && p_[pos_] <= '9') {
      v = v * 10 + (p_[pos_++] - '0');
      if (v > kMaxCount) fail(fmt::format("repetition count above {}", kMaxCount));
    }
    if (pos_ == start) fail("expected a number in {}");
    return static_cast<int>(v);
  }

  RegexNode parse_repeat() {
    RegexNode atom = parse_atom();
    while (pos_ < p_.size()) {
      int min = 0, max = -1;
      const char c = p_[pos_];
      if (c == '*') {
        ++pos_;
      } else if (c == '+') {
        ++pos_;
        min = 1;
      } else if (c == '?') {
        ++pos_;
        max = 1;
      } else if (c == '{') {
        ++pos_;
        min = parse_int();
        max = min;
        if (peek_is(',')) {
          ++pos_;
          max = peek_is('}') ? -1 : parse_int();
        }
        if (!peek_is('}')) fail("expected '}'");
        ++pos_;
        if (max >= 0 && max < min) fail("repetition {n,m} with m < n");
      } else {
        break;
      }
      if (peek_is('?')) ++pos_;  // lazy: the same strings match
      if (peek_is('+')) fail("possessive quantifiers are not supported");
      atom = repeat(std::move(atom), min, max);
    }
    return atom;
  }

  RegexNode parse_group() {
    if (peek_is('?')) {
      ++pos_;
      if (peek_is(':')) {
        ++pos_;
      } else if (peek_is('P') || peek_is('<')) {
        if (peek_is('P')) ++pos_;
        if (!peek_is('<')) fail("unsupported group syntax");
        const size_t close = p_.find('>', pos_);
        if (close == std::string_view::npos || p_.substr(pos_ + 1, 1) == "=" ||
            p_.substr(pos_ + 1, 1) == "!") {
          fail("lookbehind is not supported");
        }
        pos_ = close + 1;
      } else if (peek_is('=') || peek_is('!')) {
        fail("lookahead is not supported");
      } else {
        fail("inline flags and other (?...) groups are not supported");
      }
    }
    RegexNode inner = parse_alt();
    if (!peek_is(')')) fail("missing ')'");
    ++pos_;
    return inner;
  }

  // An escape after '\' (consumed). Returns the ranges it stands for.
  std::vector<CodeRange> parse_escape(bool in_negated_class) {
    if (pos_ >= p_.size()) fail("trailing backslash");
    const char c = p_[pos_++];
    auto hex = [&](size_t digits) {
      if (pos_ + digits > p_.size()) fail("short hex escape");
      uint32_t v = 0;
      for (size_t k = 0; k < digits; ++k) {
        const char h = p_[pos_++];
        const int d = h >= '0' && h <= '9' ? h - '0'
                      : h >= 'a' && h <= 'f' ? h - 'a' + 10
                      : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (d < 0) fail("bad hex digit");
        v = v * 16 + d;
      }
      return v;
    };
    auto one = [](uint32_t cp) { return std::vector<CodeRange>{{cp, cp}}; };
    // Inside [^...] the positive classes take their widest meaning (non-ASCII included),
    // so that the negation excludes whatever any dialect could count in them.
    const std::vector<CodeRange> wide = in_negated_class ? non_ascii() : std::vector<CodeRange>{};
    switch (c) {
      case 'd': return plus(digit_ranges(), wide);
      case 'w': return plus(word_ranges(), wide);
      case 's': return in_negated_class ? unicode_space_ranges() : space_ranges();
      case 'D': return subtract_ranges(complement_ranges(digit_ranges()), non_ascii());
      case 'W': return subtract_ranges(complement_ranges(word_ranges()), non_ascii());
      case 'S': return complement_ranges(unicode_space_ranges());
      case 'n': return one('\n');
      case 'r': return one('\r');
      case 't': return one('\t');
      case 'f': return one('\f');
      case 'v': return one('\v');
      case '0': return one(0);
      case 'x': return one(hex(2));
      case 'u':
        if (peek_is('{')) {
          ++pos_;
          const size_t close = p_.find('}', pos_);
          if (close == std::string_view::npos || close == pos_ || close - pos_ > 6) fail("bad \\u{...}");
          const uint32_t v = hex(close - pos_);
          ++pos_;
          return one(v);
        }
        return one(hex(4));
      default:
        break;
    }
    if (c >= '1' && c <= '9') fail("backreferences are not supported");
    if (std::isalnum(static_cast<unsigned char>(c))) fail(fmt::format("unsupported escape \\{}", c));
    --pos_;
    return one(next_code_point());
  }

  RegexNode parse_class() {
    const bool negated = peek_is('^');
    if (negated) ++pos_;
    std::vector<CodeRange> ranges;
    bool first = true;
    while (true) {
      if (pos_ >= p_.size()) fail("missing ']'");
      if (peek_is(']') && !first) {
        ++pos_;
        break;
      }
      first = false;
      std::vector<CodeRange> item;
      if (peek_is('[') && pos_ + 1 < p_.size() && p_[pos_ + 1] == ':') fail("POSIX classes are not supported");
      if (peek_is('\\')) {
        ++pos_;
        item = parse_escape(negated);
      } else {
        const uint32_t cp = next_code_point();
        item = {{cp, cp}};
      }
      // A range a-b: both ends single characters, '-' not last.
      if (item.size() == 1 && item[0].first == item[0].second && peek_is('-') &&
          pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
        ++pos_;
        uint32_t hi;
        if (peek_is('\\')) {
          ++pos_;
          const std::vector<CodeRange> e = parse_escape(negated);
          if (e.size() != 1 || e[0].first != e[0].second) fail("a class cannot end a range");
          hi = e[0].first;
        } else {
          hi = next_code_point();
        }
        if (hi < item[0].first) fail("range out of order");
        item[0].second = hi;
      }
      ranges.insert(ranges.end(), item.begin(), item.end());
    }
    return class_of(negated ? complement_ranges(ranges) : ranges);
  }

  RegexNode parse_atom() {
    const char c = p_[pos_];
    switch (c) {
      case '(':
        ++pos_;
        return parse_group();
      case '[':
        ++pos_;
        return parse_class();
      case '.':
        ++pos_;
        return class_of(complement_ranges({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
      case '\\':
        ++pos_;
        if (peek_is('b') || peek_is('B')) fail("word boundaries are not supported");
        if (peek_is('A') || peek_is('Z') || peek_is('z')) fail("anchors inside a pattern are not supported");
        return class_of(parse_escape(false));
      case '*': case '+': case '?': case '{':
        fail("nothing to repeat");
      case '^': case '$':
        fail("anchors are supported only at the start (^) and end ($)");
      default:
        return literal_code_point();
    }
  }

  RegexNode literal_code_point() {
    const uint32_t cp = next_code_point();
    return class_of({{cp, cp}});
  }

  std::string_view p_;
  size_t pos_ = 0;
};

}  // namespace

RegexNode parse_regex(std::string_view pattern) {
  KS_CHECK(pattern.size() <= kMaxPatternTextBytes,
           "regex: {} bytes, more than the {} a pattern may be made of", pattern.size(),
           kMaxPatternTextBytes);
  return Parser(pattern).parse();
}

}  // namespace kestrel::structured
