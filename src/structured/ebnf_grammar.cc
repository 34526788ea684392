#include "structured/ebnf_grammar.h"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <utility>

#include "core/error.h"
#include "structured/byte_dfa.h"
#include "structured/utf8_sequences.h"

namespace kestrel::structured {

// A rule's right-hand side before its references are expanded.
struct EbnfGrammar::Expr {
  enum class Kind : uint8_t { kTerminal, kRef, kSeq, kAlt, kRepeat };
  Kind kind = Kind::kSeq;
  RegexNode terminal;            // kTerminal
  int rule = -1;                 // kRef
  std::vector<Expr> children;    // kSeq, kAlt; kRepeat: the one repeated
  int min = 0, max = -1;         // kRepeat (max -1: unbounded)
};

namespace {

using Expr = EbnfGrammar::Expr;
using K = Expr::Kind;

constexpr int kMaxCount = 1000;

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

bool same_node(const RegexNode& a, const RegexNode& b) {
  if (a.kind != b.kind || a.ranges != b.ranges || a.min != b.min || a.max != b.max ||
      a.children.size() != b.children.size()) {
    return false;
  }
  for (size_t i = 0; i < a.children.size(); ++i) {
    if (!same_node(a.children[i], b.children[i])) return false;
  }
  return true;
}

bool same(const Expr& a, const Expr& b) {
  if (a.kind != b.kind || a.rule != b.rule || a.min != b.min || a.max != b.max ||
      a.children.size() != b.children.size() || !same_node(a.terminal, b.terminal)) {
    return false;
  }
  for (size_t i = 0; i < a.children.size(); ++i) {
    if (!same(a.children[i], b.children[i])) return false;
  }
  return true;
}

Expr make(K kind, std::vector<Expr> children) {
  if ((kind == K::kSeq || kind == K::kAlt) && children.size() == 1) return std::move(children[0]);
  Expr e;
  e.kind = kind;
  e.children = std::move(children);
  return e;
}

Expr terminal(RegexNode node) {
  Expr e;
  e.kind = K::kTerminal;
  e.terminal = std::move(node);
  return e;
}

class Parser {
 public:
  explicit Parser(std::string_view text) : t_(text) {}

  // Rules by name, in order of definition; references hold indices into `names`.
  std::vector<std::string> names;
  std::vector<std::optional<Expr>> bodies;
  std::vector<size_t> defined_at, first_used_at;

  void parse() {
    skip_space();
    if (pos_ == t_.size()) fail("is empty: it needs rules 'name ::= ...', one of them 'root'");
    while (pos_ < t_.size()) {
      const size_t start = pos_;
      const std::string name = read_name();
      skip_space();
      if (name.empty() || !t_.substr(pos_).starts_with("::=")) {
        pos_ = start;
        fail("expected a rule 'name ::= ...' (the GBNF notation of llama.cpp and xgrammar; Lark "
             "grammars are not read)");
      }
      pos_ += 3;
      const int r = rule_index(name, start);
      if (bodies[r]) {
        pos_ = start;
        fail(fmt::format("rule '{}' is defined twice (first at {})", name, where(defined_at[r])));
      }
      defined_at[r] = start;
      bodies[r] = parse_alternatives(/*nested=*/false);
      if (pos_ < t_.size() && t_[pos_] == ')') fail("')' without '('");
    }
    for (size_t r = 0; r < names.size(); ++r) {
      if (!bodies[r]) {
        pos_ = first_used_at[r];
        fail(fmt::format("rule '{}' is used but not defined", names[r]));
      }
    }
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw_error("grammar: {} at {}", what, where(pos_));
  }

 private:
  std::string where(size_t pos) const {
    int line = 1, column = 1;
    for (size_t i = 0; i < pos && i < t_.size(); ++i) {
      if (t_[i] == '\n') {
        ++line;
        column = 1;
      } else if ((static_cast<unsigned char>(t_[i]) & 0xC0) != 0x80) {
        ++column;
      }
    }
    return fmt::format("line {}, column {}", line, column);
  }

  int rule_index(const std::string& name, size_t at) {
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == name) return static_cast<int>(i);
    }
    names.push_back(name);
    bodies.emplace_back();
    defined_at.push_back(0);
    first_used_at.push_back(at);
    return static_cast<int>(names.size()) - 1;
  }

  void skip_space() {
    while (pos_ < t_.size()) {
      const char c = t_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < t_.size() && t_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string read_name() {
    const size_t start = pos_;
    while (pos_ < t_.size() && name_char(t_[pos_])) ++pos_;
    return std::string(t_.substr(start, pos_ - start));
  }

  // Whether the text at pos_ starts the next rule (`name ::=`).
  bool at_rule_start() const {
    size_t p = pos_;
    while (p < t_.size() && name_char(t_[p])) ++p;
    if (p == pos_) return false;
    while (p < t_.size() && (t_[p] == ' ' || t_[p] == '\t' || t_[p] == '\n' || t_[p] == '\r')) ++p;
    return t_.substr(p).starts_with("::=");
  }

  Expr parse_alternatives(bool nested) {
    std::vector<Expr> options{parse_sequence(nested)};
    while (pos_ < t_.size() && t_[pos_] == '|') {
      ++pos_;
      options.push_back(parse_sequence(nested));
    }
    return make(K::kAlt, std::move(options));
  }

  Expr parse_sequence(bool nested) {
    std::vector<Expr> items;
    for (skip_space(); pos_ < t_.size(); skip_space()) {
      const char c = t_[pos_];
      if (c == '|' || c == ')' || (!nested && at_rule_start())) break;
      Expr item = parse_item();
      skip_space();
      while (pos_ < t_.size() && (t_[pos_] == '*' || t_[pos_] == '+' || t_[pos_] == '?' || t_[pos_] == '{')) {
        item = parse_postfix(std::move(item));
        skip_space();
      }
      items.push_back(std::move(item));
    }
    return make(K::kSeq, std::move(items));
  }

  Expr parse_item() {
    const char c = t_[pos_];
    if (c == '"') return terminal(parse_string());
    if (c == '[') return terminal(parse_class());
    if (c == '.') {
      ++pos_;
      return terminal(class_of({{0, kMaxCodePoint}}));
    }
    if (c == '(') {
      const size_t open = pos_++;
      Expr inner = parse_alternatives(/*nested=*/true);
      if (pos_ >= t_.size() || t_[pos_] != ')') {
        pos_ = open;
        fail("'(' without ')'");
      }
      ++pos_;
      return inner;
    }
    if (name_char(c)) {
      const size_t at = pos_;
      Expr e;
      e.kind = K::kRef;
      e.rule = rule_index(read_name(), at);
      return e;
    }
    if (c == '<' || c == '!') fail("token matches (<...>, !<...>) are not supported");
    if (c == '\'') fail("strings are written in double quotes");
    fail(fmt::format("unexpected '{}'", std::string(1, c)));
  }

  Expr parse_postfix(Expr item) {
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
      if (pos_ < t_.size() && t_[pos_] == ',') {
        ++pos_;
        skip_space();
        max = pos_ < t_.size() && t_[pos_] == '}' ? -1 : read_count();
        skip_space();
      }
      if (pos_ >= t_.size() || t_[pos_] != '}') fail("expected '}' closing a count");
      if (max >= 0 && max < min) fail(fmt::format("count {{{},{}}} has its maximum below its minimum", min, max));
      ++pos_;
    }
    Expr e;
    e.kind = K::kRepeat;
    e.min = min;
    e.max = max;
    e.children.push_back(std::move(item));
    return e;
  }

  int read_count() {
    const size_t start = pos_;
    long long v = 0;
    while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9' && v <= kMaxCount) {
      v = v * 10 + (t_[pos_++] - '0');
    }
    if (pos_ == start) fail("expected a number in a count");
    if (v > kMaxCount) {
      pos_ = start;
      fail(fmt::format("counts above {} are not supported", kMaxCount));
    }
    return static_cast<int>(v);
  }

  // A code point of the text (UTF-8), consumed.
  uint32_t next_code_point() {
    uint32_t cp = 0;
    const int len = decode_utf8(t_, pos_, cp);
    if (len == 0) fail("invalid UTF-8");
    pos_ += len;
    return cp;
  }

  // One character of a string or class: an escape or a code point.
  uint32_t read_char() {
    if (t_[pos_] != '\\') return next_code_point();
    const size_t start = pos_++;
    if (pos_ >= t_.size()) fail("'\\' at the end");
    const char e = t_[pos_++];
    switch (e) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': return uint32_t(e);
      case 'x': return read_hex(2, start);
      case 'u': return read_hex(4, start);
      case 'U': return read_hex(8, start);
      default:
        pos_ = start;
        fail(fmt::format("unknown escape '\\{}'", std::string(1, e)));
    }
  }

  uint32_t read_hex(int digits, size_t start) {
    uint64_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char h = pos_ < t_.size() ? t_[pos_] : '\0';
      const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                  : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (d < 0) {
        pos_ = start;
        fail(fmt::format("an escape '\\{}' needs {} hex digits", t_[start + 1], digits));
      }
      v = v * 16 + uint64_t(d);
      ++pos_;
    }
    if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) {
      pos_ = start;
      fail(fmt::format("escape of U+{:X}, which is not a character", v));
    }
    return static_cast<uint32_t>(v);
  }

  RegexNode parse_string() {
    const size_t open = pos_++;
    std::vector<RegexNode> chars;
    while (pos_ < t_.size() && t_[pos_] != '"') {
      if (t_[pos_] == '\n') break;
      const uint32_t cp = read_char();
      chars.push_back(class_of({{cp, cp}}));
    }
    if (pos_ >= t_.size() || t_[pos_] != '"') {
      pos_ = open;
      fail("string without its closing '\"' on the same line");
    }
    ++pos_;
    return concat(std::move(chars));
  }

  RegexNode parse_class() {
    const size_t open = pos_++;
    const bool negated = pos_ < t_.size() && t_[pos_] == '^';
    if (negated) ++pos_;
    std::vector<CodeRange> ranges;
    while (pos_ < t_.size() && t_[pos_] != ']' && t_[pos_] != '\n') {
      const uint32_t lo = read_char();
      uint32_t hi = lo;
      if (pos_ + 1 < t_.size() && t_[pos_] == '-' && t_[pos_ + 1] != ']') {
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
    if (pos_ >= t_.size() || t_[pos_] != ']') {
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

  std::string_view t_;
  size_t pos_ = 0;
};

// Expands references below the nesting limit, counting the nodes made.
class Expander {
 public:
  Expander(const std::vector<std::unique_ptr<Expr>>& rules, int nesting)
      : rules_(rules), nesting_(nesting), active_(rules.size(), 0) {}

  RegexNode expand(const Expr& e) {
    if (++nodes_ > kMaxPatternNodes) {
      throw PatternTooLarge(fmt::format(
          "structured output: the grammar expands to more than {} parts; give it fewer or "
          "smaller rules", kMaxPatternNodes));
    }
    switch (e.kind) {
      case K::kTerminal:
        nodes_ += node_count(e.terminal);
        return e.terminal;
      case K::kRef: {
        int& depth = active_[e.rule];
        if (depth >= nesting_) return alt({});  // deeper than the limit: matches nothing
        ++depth;
        RegexNode body = expand(*rules_[e.rule]);
        --depth;
        return body;
      }
      case K::kAlt: {
        std::vector<RegexNode> options;
        for (const Expr& c : e.children) options.push_back(expand(c));
        return alt(std::move(options));
      }
      case K::kRepeat:
        return repeat(expand(e.children[0]), e.min, e.max);
      case K::kSeq:
        return expand_sequence(e.children);
    }
    return empty_node();
  }

 private:
  // `X (S X){m,n}` as separated(X, S, m + 1, n + 1): one copy of X where spelling it out
  // makes two, and so 2^depth copies of a nested list's items.
  RegexNode expand_sequence(const std::vector<Expr>& items) {
    std::vector<RegexNode> parts;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i + 1 < items.size()) {
        const Expr& next = items[i + 1];
        const Expr& body = next.kind == K::kRepeat ? next.children[0] : next;
        if (next.kind == K::kRepeat && body.kind == K::kSeq && body.children.size() >= 2 &&
            same(body.children.back(), items[i])) {
          std::vector<RegexNode> sep;
          for (size_t k = 0; k + 1 < body.children.size(); ++k) sep.push_back(expand(body.children[k]));
          parts.push_back(separated(expand(items[i]), concat(std::move(sep)), next.min + 1,
                                    next.max < 0 ? -1 : next.max + 1));
          ++i;
          continue;
        }
      }
      parts.push_back(expand(items[i]));
    }
    return concat(std::move(parts));
  }

  const std::vector<std::unique_ptr<Expr>>& rules_;
  const int nesting_;
  std::vector<int> active_;
  size_t nodes_ = 0;
};

// Rules reachable from `from` (references followed), marked in `seen`.
void mark_reachable(const Expr& e, const std::vector<std::unique_ptr<Expr>>& rules, std::vector<char>& seen) {
  if (e.kind == K::kRef) {
    if (seen[e.rule]) return;
    seen[e.rule] = 1;
    mark_reachable(*rules[e.rule], rules, seen);
    return;
  }
  for (const Expr& c : e.children) mark_reachable(c, rules, seen);
}

}  // namespace

EbnfGrammar::EbnfGrammar() = default;
EbnfGrammar::~EbnfGrammar() = default;
EbnfGrammar::EbnfGrammar(EbnfGrammar&&) noexcept = default;
EbnfGrammar& EbnfGrammar::operator=(EbnfGrammar&&) noexcept = default;

EbnfGrammar EbnfGrammar::parse(std::string_view text) {
  Parser p(text);
  p.parse();
  EbnfGrammar g;
  g.names_ = std::move(p.names);
  for (auto& body : p.bodies) g.rules_.push_back(std::make_unique<Expr>(std::move(*body)));
  for (size_t r = 0; r < g.names_.size(); ++r) {
    if (g.names_[r] == "root") g.root_ = static_cast<int>(r);
  }
  if (g.root_ < 0) throw_error("grammar: there is no rule 'root' (the whole output matches root)");
  // A rule is recursive when it reaches itself; only those reachable from root matter.
  std::vector<char> from_root(g.rules_.size(), 0);
  from_root[g.root_] = 1;
  mark_reachable(*g.rules_[g.root_], g.rules_, from_root);
  for (size_t r = 0; r < g.rules_.size() && !g.recursive_; ++r) {
    if (!from_root[r]) continue;
    std::vector<char> seen(g.rules_.size(), 0);
    mark_reachable(*g.rules_[r], g.rules_, seen);
    g.recursive_ = seen[r] != 0;
  }
  return g;
}

RegexNode EbnfGrammar::pattern(int nesting) const {
  KS_CHECK(nesting >= 1, "grammar nesting must be >= 1, got {}", nesting);
  Expander x(rules_, nesting);
  Expr root;
  root.kind = K::kRef;
  root.rule = root_;
  return x.expand(root);
}

}  // namespace kestrel::structured
