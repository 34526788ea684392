// A grammar's rules as a notation's parser reads them (gbnf_parser.cc, lark_parser.cc),
// before ebnf_grammar.cc expands them into a pattern, and the text scanning both parsers
// share: position, errors with line and column, rule names, escapes.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "structured/regex_ast.h"

namespace kestrel::structured {

struct GrammarExpr {
  enum class Kind : uint8_t { kTerminal, kRef, kSeq, kAlt, kRepeat };
  Kind kind = Kind::kSeq;
  RegexNode terminal;                 // kTerminal
  int rule = -1;                      // kRef
  std::vector<GrammarExpr> children;  // kSeq, kAlt; kRepeat: the one repeated
  int min = 0, max = -1;              // kRepeat (max -1: unbounded)
};

// One child is that child; none is the empty sequence.
GrammarExpr seq_of(std::vector<GrammarExpr> children);
GrammarExpr alt_of(std::vector<GrammarExpr> children);
GrammarExpr terminal_of(RegexNode node);
GrammarExpr repeat_of(GrammarExpr child, int min, int max);
// The code points in a row.
RegexNode literal_of(const std::vector<uint32_t>& code_points);
// Structural equality.
bool same_expr(const GrammarExpr& a, const GrammarExpr& b);

struct GrammarRules {
  std::vector<std::string> names;
  std::vector<GrammarExpr> bodies;  // by rule index, as names
  // Lark's terminals (upper-case names): one token, with no ignored text inside.
  std::vector<char> lexical;
  // Lark's %ignore: text that may come between any two tokens of a rule that is not
  // lexical, and around the whole output. Empty: none.
  std::vector<GrammarExpr> ignored;
  int root = -1;
};

// What both parsers share. `t_` is the whole text, `pos_` where the parser is.
class GrammarText {
 public:
  explicit GrammarText(std::string_view text) : t_(text) {}

  // Throws kestrel::Error "grammar: <what> at line L, column C" (of pos_).
  [[noreturn]] void fail(const std::string& what) const;
  std::string where(size_t pos) const;

 protected:
  bool at_end() const { return pos_ >= t_.size(); }
  char peek() const { return t_[pos_]; }
  bool next_is(std::string_view s) const { return t_.substr(pos_).starts_with(s); }
  // Skips white space and comments (from `comment` to the end of the line).
  void skip_space(std::string_view comment);
  // The longest run of characters `in_name` accepts, consumed.
  std::string read_name(bool (*in_name)(char));
  // A "string" on one line: its code points, escapes read.
  std::vector<uint32_t> read_string();
  // The index of rule `name`, made on first mention (`at`: where, for "used but not defined").
  int rule_index(const std::string& name, size_t at);
  // Records the body of rule r, defined at `at`; a second definition is an error.
  void define(int r, GrammarExpr body, size_t at);
  // The rules, every one used defined, `root_name` among them.
  GrammarRules finish(const std::string& root_name, const std::string& notation);
  // A code point of the text (UTF-8), consumed.
  uint32_t next_code_point();
  // One character of a string or class: an escape (\n \r \t \\ \" \' \[ \] \- \^ \/ \xHH
  // \uHHHH \UHHHHHHHH) or a code point.
  uint32_t read_char();
  // A count of a repetition, at most 1,000.
  int read_count();

  std::string_view t_;
  size_t pos_ = 0;
  std::vector<std::string> names_;
  std::vector<std::optional<GrammarExpr>> bodies_;
  std::vector<size_t> defined_at_, first_used_at_;
  std::vector<char> lexical_;

 private:
  uint32_t read_hex(int digits, size_t start);
};

// The notations: llama.cpp's and xgrammar's GBNF (`name ::= ...`, root `root`), and Lark's
// (`name: ...`, root `start`). Throw kestrel::Error naming the mistake and where it is.
GrammarRules parse_gbnf(std::string_view text);
GrammarRules parse_lark(std::string_view text);

}  // namespace kestrel::structured
