#include "structured/grammar_rules.h"

#include <fmt/format.h>

#include "core/error.h"
#include "structured/utf8_sequences.h"

namespace kestrel::structured {

using K = GrammarExpr::Kind;

namespace {

constexpr int kMaxCount = 1000;

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

GrammarExpr list_of(K kind, std::vector<GrammarExpr> children) {
  if (children.size() == 1) return std::move(children[0]);
  GrammarExpr e;
  e.kind = kind;
  e.children = std::move(children);
  return e;
}

}  // namespace

GrammarExpr seq_of(std::vector<GrammarExpr> children) {
  return list_of(K::kSeq, std::move(children));
}
GrammarExpr alt_of(std::vector<GrammarExpr> children) {
  return list_of(K::kAlt, std::move(children));
}

GrammarExpr terminal_of(RegexNode node) {
  GrammarExpr e;
  e.kind = K::kTerminal;
  e.terminal = std::move(node);
  return e;
}

GrammarExpr repeat_of(GrammarExpr child, int min, int max) {
  GrammarExpr e;
  e.kind = K::kRepeat;
  e.min = min;
  e.max = max;
  e.children.push_back(std::move(child));
  return e;
}

RegexNode literal_of(const std::vector<uint32_t>& code_points) {
  std::vector<RegexNode> chars;
  for (uint32_t cp : code_points) chars.push_back(class_of({{cp, cp}}));
  return concat(std::move(chars));
}

bool same_expr(const GrammarExpr& a, const GrammarExpr& b) {
  if (a.kind != b.kind || a.rule != b.rule || a.min != b.min || a.max != b.max ||
      a.children.size() != b.children.size() || !same_node(a.terminal, b.terminal)) {
    return false;
  }
  for (size_t i = 0; i < a.children.size(); ++i) {
    if (!same_expr(a.children[i], b.children[i])) return false;
  }
  return true;
}

void GrammarText::fail(const std::string& what) const {
  throw_error("grammar: {} at {}", what, where(pos_));
}

std::string GrammarText::where(size_t pos) const {
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

int GrammarText::rule_index(const std::string& name, size_t at) {
  for (size_t i = 0; i < names_.size(); ++i) {
    if (names_[i] == name) return static_cast<int>(i);
  }
  names_.push_back(name);
  bodies_.emplace_back();
  defined_at_.push_back(0);
  first_used_at_.push_back(at);
  lexical_.push_back(0);
  return static_cast<int>(names_.size()) - 1;
}

void GrammarText::define(int r, GrammarExpr body, size_t at) {
  if (bodies_[r]) {
    pos_ = at;
    fail(fmt::format("rule '{}' is defined twice (first at {})", names_[r], where(defined_at_[r])));
  }
  defined_at_[r] = at;
  bodies_[r] = std::move(body);
}

GrammarRules GrammarText::finish(const std::string& root_name, const std::string& notation) {
  GrammarRules out;
  for (size_t r = 0; r < names_.size(); ++r) {
    if (!bodies_[r]) {
      pos_ = first_used_at_[r];
      fail(fmt::format("rule '{}' is used but not defined", names_[r]));
    }
    if (names_[r] == root_name) out.root = static_cast<int>(r);
    out.bodies.push_back(std::move(*bodies_[r]));
  }
  if (out.root < 0) {
    throw_error("grammar: there is no rule '{}' (in {}, the whole output matches {})", root_name,
                notation, root_name);
  }
  out.names = std::move(names_);
  out.lexical = std::move(lexical_);
  return out;
}

void GrammarText::skip_space(std::string_view comment) {
  while (!at_end()) {
    const char c = peek();
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++pos_;
    } else if (next_is(comment)) {
      while (!at_end() && peek() != '\n') ++pos_;
    } else {
      break;
    }
  }
}

std::string GrammarText::read_name(bool (*in_name)(char)) {
  const size_t start = pos_;
  while (!at_end() && in_name(peek())) ++pos_;
  return std::string(t_.substr(start, pos_ - start));
}

std::vector<uint32_t> GrammarText::read_string() {
  const size_t open = pos_++;
  std::vector<uint32_t> out;
  while (!at_end() && peek() != '"' && peek() != '\n') out.push_back(read_char());
  if (at_end() || peek() != '"') {
    pos_ = open;
    fail("string without its closing '\"' on the same line");
  }
  ++pos_;
  return out;
}

uint32_t GrammarText::next_code_point() {
  uint32_t cp = 0;
  const int len = decode_utf8(t_, pos_, cp);
  if (len == 0) fail("invalid UTF-8");
  pos_ += len;
  return cp;
}

uint32_t GrammarText::read_char() {
  if (peek() != '\\') return next_code_point();
  const size_t start = pos_++;
  if (at_end()) fail("'\\' at the end");
  const char e = t_[pos_++];
  switch (e) {
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    case 'f':
      return '\f';
    case '\\':
    case '"':
    case '\'':
    case '[':
    case ']':
    case '-':
    case '^':
    case '/':
      return static_cast<uint32_t>(e);
    case 'x':
      return read_hex(2, start);
    case 'u':
      return read_hex(4, start);
    case 'U':
      return read_hex(8, start);
    default:
      pos_ = start;
      fail(fmt::format("unknown escape '\\{}'", std::string(1, e)));
  }
}

uint32_t GrammarText::read_hex(int digits, size_t start) {
  uint64_t v = 0;
  for (int i = 0; i < digits; ++i) {
    const char h = at_end() ? '\0' : peek();
    const int d = h >= '0' && h <= '9'   ? h - '0'
                  : h >= 'a' && h <= 'f' ? h - 'a' + 10
                  : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                         : -1;
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

int GrammarText::read_count() {
  const size_t start = pos_;
  long long v = 0;
  while (!at_end() && peek() >= '0' && peek() <= '9' && v <= kMaxCount)
    v = v * 10 + (t_[pos_++] - '0');
  if (pos_ == start) fail("expected a number in a count");
  if (v > kMaxCount) {
    pos_ = start;
    fail(fmt::format("counts above {} are not supported", kMaxCount));
  }
  return static_cast<int>(v);
}

}  // namespace kestrel::structured
