// GBNF, as llama.cpp and xgrammar read it (ebnf_grammar.h has the notation).
#include <fmt/format.h>

#include "structured/grammar_rules.h"

namespace kestrel::structured {
namespace {

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

class GbnfParser : public GrammarText {
 public:
  using GrammarText::GrammarText;

  GrammarRules parse() {
    skip_space();
    if (at_end()) fail("is empty: it needs rules 'name ::= ...', one of them 'root'");
    while (!at_end()) {
      const size_t start = pos_;
      const std::string name = read_name();
      skip_space();
      if (name.empty() || !next_is("::=")) {
        pos_ = start;
        fail("expected a rule 'name ::= ...'");
      }
      pos_ += 3;
      const int r = rule_index(name, start);
      GrammarExpr body = parse_alternatives(/*nested=*/false);
      define(r, std::move(body), start);
      if (!at_end() && peek() == ')') fail("')' without '('");
    }
    return finish("root", "GBNF");
  }

 private:
  void skip_space() { GrammarText::skip_space("#"); }
  std::string read_name() { return GrammarText::read_name(name_char); }

  // Whether the text at pos_ starts the next rule (`name ::=`).
  bool at_rule_start() const {
    size_t p = pos_;
    while (p < t_.size() && name_char(t_[p])) ++p;
    if (p == pos_) return false;
    while (p < t_.size() && (t_[p] == ' ' || t_[p] == '\t' || t_[p] == '\n' || t_[p] == '\r')) ++p;
    return t_.substr(p).starts_with("::=");
  }

  GrammarExpr parse_alternatives(bool nested) {
    std::vector<GrammarExpr> options{parse_sequence(nested)};
    while (!at_end() && peek() == '|') {
      ++pos_;
      options.push_back(parse_sequence(nested));
    }
    return alt_of(std::move(options));
  }

  GrammarExpr parse_sequence(bool nested) {
    std::vector<GrammarExpr> items;
    for (skip_space(); !at_end(); skip_space()) {
      const char c = peek();
      if (c == '|' || c == ')' || (!nested && at_rule_start())) break;
      GrammarExpr item = parse_item();
      skip_space();
      while (!at_end() && (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{')) {
        item = parse_postfix(std::move(item));
        skip_space();
      }
      items.push_back(std::move(item));
    }
    return seq_of(std::move(items));
  }

  GrammarExpr parse_item() {
    const char c = peek();
    if (c == '"') return terminal_of(literal_of(read_string()));
    if (c == '[') return terminal_of(parse_class());
    if (c == '.') {
      ++pos_;
      return terminal_of(class_of({{0, kMaxCodePoint}}));
    }
    if (c == '(') {
      const size_t open = pos_++;
      GrammarExpr inner = parse_alternatives(/*nested=*/true);
      if (at_end() || peek() != ')') {
        pos_ = open;
        fail("'(' without ')'");
      }
      ++pos_;
      return inner;
    }
    if (name_char(c)) {
      const size_t at = pos_;
      GrammarExpr e;
      e.kind = GrammarExpr::Kind::kRef;
      e.rule = rule_index(read_name(), at);
      return e;
    }
    if (c == '<' || c == '!') fail("token matches (<...>, !<...>) are not supported");
    if (c == '\'') fail("strings are written in double quotes");
    fail(fmt::format("unexpected '{}'", std::string(1, c)));
  }

  GrammarExpr parse_postfix(GrammarExpr item) {
    const char c = t_[pos_++];
    int min = 0, max = -1;
    if (c == '+') {
      min = 1;
    } else if (c == '?') {
      max = 1;
    } else if (c == '{') {
      skip_space();
      min = read_count();
      skip_space();
      max = min;
      if (!at_end() && peek() == ',') {
        ++pos_;
        skip_space();
        max = !at_end() && peek() == '}' ? -1 : read_count();
        skip_space();
      }
      if (at_end() || peek() != '}') fail("expected '}' closing a count");
      if (max >= 0 && max < min)
        fail(fmt::format("count {{{},{}}} has its maximum below its minimum", min, max));
      ++pos_;
    }
    return repeat_of(std::move(item), min, max);
  }

  RegexNode parse_class() {
    const size_t open = pos_++;
    const bool negated = !at_end() && peek() == '^';
    if (negated) ++pos_;
    std::vector<CodeRange> ranges;
    while (!at_end() && peek() != ']' && peek() != '\n') {
      const uint32_t lo = read_char();
      uint32_t hi = lo;
      if (pos_ + 1 < t_.size() && peek() == '-' && t_[pos_ + 1] != ']') {
        ++pos_;
        const size_t at = pos_;
        hi = read_char();
        if (hi < lo) {
          pos_ = at;
          fail("a class range runs backwards");
        }
      }
      ranges.emplace_back(lo, hi);
    }
    if (at_end() || peek() != ']') {
      pos_ = open;
      fail("'[' without ']' on the same line");
    }
    ++pos_;
    if (ranges.empty()) {
      pos_ = open;
      fail("an empty class");
    }
    return class_of(negated ? complement_ranges(normalize_ranges(ranges)) : std::move(ranges));
  }
};

}  // namespace

GrammarRules parse_gbnf(std::string_view text) { return GbnfParser(text).parse(); }

}  // namespace kestrel::structured
