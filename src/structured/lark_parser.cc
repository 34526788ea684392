// Lark's grammar notation, as vLLM takes it for guided_grammar (it turns Lark into EBNF
// for xgrammar; outlines reads it directly):
// - rules `name: ...` and terminals `NAME: ...` (a terminal's `.priority` is read and
//   ignored, as are the ? and ! of a rule and `-> alias` after an alternative); the output
//   matches `start`; `//` comments;
// - "strings" ("..."i: ASCII letters in either case), /regexes/ (regex_parser.h's syntax;
//   the i flag only), "a".."z" ranges, names, (groups), [optional], `|`, ? * +, `~ n` and
//   `~ n..m`;
// - `%import common.NAME` (`-> ALIAS`) and `%import common (A, B)`: common.lark's
//   terminals, written here as regexes; `%ignore X`: X may come between any two tokens of a
//   rule (not inside a terminal) and around the output.
// Not read (an Error says so): other modules, templates, %declare, %override, %extend. Lark's
// lexer is not modelled: two terminals may touch where its lexer would read one token.
#include <fmt/format.h>

#include <cctype>
#include <utility>

#include "core/error.h"
#include "structured/grammar_rules.h"
#include "structured/regex_parser.h"

namespace kestrel::structured {
namespace {

// common.lark's terminals, as regexes of the same strings.
struct CommonTerminal {
  const char* name;
  const char* regex;
};
constexpr CommonTerminal kCommon[] = {
    {"DIGIT", "[0-9]"},
    {"HEXDIGIT", "[a-fA-F0-9]"},
    {"INT", "[0-9]+"},
    {"SIGNED_INT", "[+-]?[0-9]+"},
    {"DECIMAL", "[0-9]+\\.[0-9]*|\\.[0-9]+"},
    {"FLOAT", "[0-9]+[eE][+-]?[0-9]+|([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?"},
    {"SIGNED_FLOAT", "[+-]?([0-9]+[eE][+-]?[0-9]+|([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?)"},
    {"NUMBER", "[0-9]+[eE][+-]?[0-9]+|([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+"},
    {"SIGNED_NUMBER",
     "[+-]?([0-9]+[eE][+-]?[0-9]+|([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+)"},
    {"ESCAPED_STRING", "\"([^\"\\\\\\n]|\\\\[^\\n])*\""},
    {"LCASE_LETTER", "[a-z]"},
    {"UCASE_LETTER", "[A-Z]"},
    {"LETTER", "[A-Za-z]"},
    {"WORD", "[A-Za-z]+"},
    {"CNAME", "[_A-Za-z][_A-Za-z0-9]*"},
    {"WS_INLINE", "[ \\t]+"},
    {"WS", "[ \\t\\f\\r\\n]+"},
    {"CR", "\\r"},
    {"LF", "\\n"},
    {"NEWLINE", "(\\r?\\n)+"},
    {"SH_COMMENT", "#[^\\n]*"},
    {"CPP_COMMENT", "//[^\\n]*"},
    {"SQL_COMMENT", "--[^\\n]*"},
};

bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Lark's terminals are upper case (_?[A-Z][_A-Z0-9]*), its rules lower case.
bool is_terminal_name(const std::string& name) {
  const size_t first = name.find_first_not_of('_');
  return first != std::string::npos && std::isupper(static_cast<unsigned char>(name[first]));
}

// Each ASCII letter of `node`'s classes in both cases.
RegexNode either_case(const RegexNode& node) {
  if (node.kind != RegexNode::Kind::kClass) {
    RegexNode out = node;
    for (RegexNode& c : out.children) c = either_case(c);
    return out;
  }
  std::vector<CodeRange> ranges = node.ranges;
  for (const auto& [lo, hi] : node.ranges) {
    for (uint32_t c = std::max<uint32_t>(lo, 'A'); c <= std::min<uint32_t>(hi, 'z'); ++c) {
      if (std::isalpha(static_cast<int>(c))) {
        const uint32_t other = std::islower(static_cast<int>(c)) ? c - 32 : c + 32;
        ranges.emplace_back(other, other);
      }
    }
  }
  return class_of(std::move(ranges));
}

class LarkParser : public GrammarText {
 public:
  using GrammarText::GrammarText;

  GrammarRules parse() {
    skip_space();
    if (at_end()) fail("is empty: it needs rules 'name: ...', one of them 'start'");
    while (!at_end()) {
      if (peek() == '%') {
        directive();
      } else {
        definition();
      }
      skip_space();
    }
    GrammarRules rules = finish("start", "Lark");
    rules.ignored = std::move(ignored_);
    return rules;
  }

 private:
  void skip_space() { GrammarText::skip_space("//"); }

  void skip_inline_space() {
    while (!at_end() && (peek() == ' ' || peek() == '\t')) ++pos_;
  }

  std::string read_name() { return GrammarText::read_name(name_char); }

  // Whether pos_ starts a definition (`?name:`, `NAME.2:`) or a directive.
  bool at_definition() const {
    size_t p = pos_;
    if (p < t_.size() && t_[p] == '%') return true;
    if (p < t_.size() && (t_[p] == '?' || t_[p] == '!')) ++p;
    const size_t name = p;
    while (p < t_.size() && name_char(t_[p])) ++p;
    if (p == name) return false;
    if (p < t_.size() && t_[p] == '.') {
      ++p;
      while (p < t_.size() && std::isdigit(static_cast<unsigned char>(t_[p]))) ++p;
    }
    while (p < t_.size() && (t_[p] == ' ' || t_[p] == '\t')) ++p;
    return p < t_.size() && t_[p] == ':';
  }

  void definition() {
    const size_t start = pos_;
    if (peek() == '?' || peek() == '!') ++pos_;
    const std::string name = read_name();
    if (name.empty()) fail("expected a rule 'name: ...'");
    if (!at_end() && peek() == '{') fail("Lark templates are not supported");
    if (!at_end() && peek() == '.') {  // priority: the lexer's business
      ++pos_;
      (void)read_count();
    }
    skip_inline_space();
    if (at_end() || peek() != ':') fail(fmt::format("expected ':' after '{}'", name));
    ++pos_;
    const int r = rule_index(name, start);
    lexical_[r] = is_terminal_name(name);
    GrammarExpr body = parse_alternatives(/*nested=*/false);
    define(r, std::move(body), start);
    if (!at_end() && (peek() == ')' || peek() == ']'))
      fail(fmt::format("'{}' without its opening", peek()));
  }

  void directive() {
    const size_t start = pos_++;
    const std::string word = read_name();
    skip_inline_space();
    if (word == "ignore") {
      ignored_.push_back(parse_alternatives(/*nested=*/false));
      return;
    }
    if (word != "import") {
      pos_ = start;
      fail(fmt::format("%{} is not supported (only %import common... and %ignore)", word));
    }
    const size_t module_at = pos_;
    std::string module = read_name();
    while (!at_end() && peek() == '.' && pos_ + 1 < t_.size() && name_char(t_[pos_ + 1])) {
      ++pos_;
      const std::string part = read_name();
      if (module == "common" && std::isupper(static_cast<unsigned char>(part[0]))) {
        skip_inline_space();
        std::string alias = part;
        if (next_is("->")) {
          pos_ += 2;
          skip_inline_space();
          alias = read_name();
        }
        import_common(part, alias, start);
        return;
      }
      module += "." + part;
    }
    if (module != "common") {
      pos_ = module_at;
      fail(fmt::format("only Lark's common module can be imported, not '{}'", module));
    }
    skip_inline_space();
    if (at_end() || peek() != '(')
      fail("expected '%import common.NAME' or '%import common (A, B)'");
    ++pos_;
    for (;;) {
      skip_space();
      const std::string part = read_name();
      import_common(part, part, start);
      skip_space();
      if (!at_end() && peek() == ',') {
        ++pos_;
        continue;
      }
      if (at_end() || peek() != ')') fail("expected ')' closing the imported names");
      ++pos_;
      return;
    }
  }

  void import_common(const std::string& name, const std::string& alias, size_t at) {
    for (const CommonTerminal& c : kCommon) {
      if (name == c.name) {
        const int r = rule_index(alias, at);
        lexical_[r] = 1;
        define(r, terminal_of(parse_regex(c.regex)), at);
        return;
      }
    }
    pos_ = at;
    fail(fmt::format("common.{} is not one of the common terminals read here", name));
  }

  GrammarExpr parse_alternatives(bool nested) {
    std::vector<GrammarExpr> options{parse_sequence(nested)};
    for (;;) {
      skip_space();
      if (at_end() || peek() != '|') break;
      ++pos_;
      options.push_back(parse_sequence(nested));
    }
    return alt_of(std::move(options));
  }

  bool at_sequence_end(bool nested) const {
    const char c = peek();
    return c == '|' || c == ')' || c == ']' || (!nested && at_definition());
  }

  GrammarExpr parse_sequence(bool nested) {
    std::vector<GrammarExpr> items;
    for (skip_space(); !at_end() && !at_sequence_end(nested); skip_space()) {
      if (next_is("->")) {  // an alias names the tree node: nothing to match
        pos_ += 2;
        skip_inline_space();
        (void)read_name();
        continue;
      }
      GrammarExpr item = parse_item();
      for (;;) {
        skip_inline_space();
        if (at_end()) break;
        const char c = peek();
        if (c == '*' || c == '+') {
          ++pos_;
          item = repeat_of(std::move(item), c == '+' ? 1 : 0, -1);
        } else if (c == '?' && !(pos_ + 1 < t_.size() && name_char(t_[pos_ + 1]))) {
          ++pos_;
          item = repeat_of(std::move(item), 0, 1);
        } else if (c == '~') {
          ++pos_;
          skip_inline_space();
          const int min = read_count();
          int max = min;
          if (next_is("..")) {
            pos_ += 2;
            max = read_count();
            if (max < min) fail(fmt::format("count ~ {}..{} runs backwards", min, max));
          }
          item = repeat_of(std::move(item), min, max);
        } else {
          break;
        }
      }
      items.push_back(std::move(item));
    }
    return seq_of(std::move(items));
  }

  GrammarExpr parse_item() {
    const char c = peek();
    if (c == '"') {
      const size_t at = pos_;
      std::vector<uint32_t> text = read_string();
      const bool fold =
          !at_end() && peek() == 'i' && !(pos_ + 1 < t_.size() && name_char(t_[pos_ + 1]));
      if (fold) ++pos_;
      if (next_is("..")) {
        pos_ += 2;
        if (at_end() || peek() != '"') fail("expected a string after '..'");
        const std::vector<uint32_t> to = read_string();
        if (text.size() != 1 || to.size() != 1) {
          pos_ = at;
          fail("a range \"a\"..\"z\" is between single characters");
        }
        if (to[0] < text[0]) {
          pos_ = at;
          fail("a range runs backwards");
        }
        return terminal_of(class_of({{text[0], to[0]}}));
      }
      RegexNode literal = literal_of(text);
      return terminal_of(fold ? either_case(literal) : std::move(literal));
    }
    if (c == '/') return terminal_of(parse_regex_literal());
    if (c == '(' || c == '[') {
      const size_t open = pos_++;
      const char close = c == '(' ? ')' : ']';
      GrammarExpr inner = parse_alternatives(/*nested=*/true);
      if (at_end() || peek() != close) {
        pos_ = open;
        fail(fmt::format("'{}' without '{}'", c, close));
      }
      ++pos_;
      return c == '[' ? repeat_of(std::move(inner), 0, 1) : std::move(inner);
    }
    if (name_char(c)) {
      const size_t at = pos_;
      GrammarExpr e;
      e.kind = GrammarExpr::Kind::kRef;
      e.rule = rule_index(read_name(), at);
      if (!at_end() && peek() == '{') fail("Lark templates are not supported");
      return e;
    }
    if (c == '\'') fail("strings are written in double quotes");
    fail(fmt::format("unexpected '{}'", std::string(1, c)));
  }

  RegexNode parse_regex_literal() {
    const size_t open = pos_++;
    const size_t body = pos_;
    while (!at_end() && peek() != '/' && peek() != '\n')
      pos_ += peek() == '\\' && pos_ + 1 < t_.size() ? 2 : 1;
    if (at_end() || peek() != '/') {
      pos_ = open;
      fail("regex without its closing '/' on the same line");
    }
    const std::string_view source = t_.substr(body, pos_ - body);
    ++pos_;
    bool fold = false;
    while (!at_end() && std::isalpha(static_cast<unsigned char>(peek()))) {
      if (peek() != 'i') fail(fmt::format("the regex flag '{}' is not supported (only i)", peek()));
      fold = true;
      ++pos_;
    }
    RegexNode node;
    try {
      node = parse_regex(source);
    } catch (const Error& e) {
      pos_ = open;
      fail(e.what());
    }
    return fold ? either_case(node) : node;
  }

  std::vector<GrammarExpr> ignored_;
};

}  // namespace

GrammarRules parse_lark(std::string_view text) { return LarkParser(text).parse(); }

}  // namespace kestrel::structured
