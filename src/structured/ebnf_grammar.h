// Context-free grammars (vLLM's guided_grammar and structured_outputs.grammar) as a
// RegexNode of the text to generate, in either notation vLLM takes.
//
// GBNF, as llama.cpp and xgrammar (vLLM's default backend) read it: rules
// `name ::= alternatives`, the output matching rule `root`. A name is letters, digits, '-'
// and '_'. An alternative is a sequence, possibly empty, of: "strings", [classes]
// ([a-z0-9_], [^\n"]), '.' (any code point), rule names and (groups), each optionally
// followed by *, +, ?, {m}, {m,} or {m,n} (counts up to 1,000). Escapes in strings and
// classes: \n \r \t \f \\ \" \' \[ \] \- \^ \/ \xHH \uHHHH \UHHHHHHHH. '#' starts a
// comment to the end of the line. A rule runs on over line breaks until the next
// `name ::=`. llama.cpp's token matches (<think>, <[1000]>, !<...>) are not read.
//
// Lark (lark_parser.cc has the details): rules `name: ...` (terminals in upper case), the
// output matching `start`; "strings" (with the i flag), /regexes/ (regex_parser.h's
// syntax; the i flag), "a".."z" ranges, [optional] parts, ~ counts, %import of common.lark's
// terminals, and %ignore, whose text may come between any two tokens of a rule.
//
// A grammar may refer to itself (nested lists, expressions in parentheses), and an automaton
// cannot count nesting: a rule that is already being expanded is expanded again at most
// `nesting` deep along one path, and not at all past that (the alternative that would go
// deeper is dropped). Every output matches the grammar; text nested deeper than that is never
// produced. A rule that refers to itself only at its end (`ws ::= ([ \t] ws)?`) is a
// repetition, compiled as one exactly and not to a depth. `X (S X)*` (and X (S X){m,n}) is kept as
// one list of X, not two copies of X, so that nesting multiplies the automaton by less.
#pragma once

#include <string_view>

#include "structured/grammar_rules.h"
#include "structured/regex_ast.h"

namespace kestrel::structured {

// The deepest nesting of a recursive rule that a grammar is tried at; GrammarCompiler tries
// smaller ones while the automaton is too large (kGrammarNestings, largest first).
inline constexpr int kGrammarNestings[] = {6, 4, 3, 2, 1};

class EbnfGrammar {
 public:
  // Lark where the first rule is written `name:` (or a % directive comes first), else GBNF.
  // Throws kestrel::Error ("grammar: ... at line L, column C") for a syntax error, a rule
  // used but not defined or defined twice, or no root rule.
  static EbnfGrammar parse(std::string_view text);

  // The pattern of the root rule, recursive rules expanded at most `nesting` (>= 1) deep.
  // Throws PatternTooLarge (byte_dfa.h) past kMaxPatternNodes.
  RegexNode pattern(int nesting) const;
  // Whether some rule refers to itself, directly or through others, on a path from the root
  // (then pattern() depends on the nesting).
  bool recursive() const { return recursive_; }

 private:
  GrammarRules rules_;
  bool recursive_ = false;
};

}  // namespace kestrel::structured
