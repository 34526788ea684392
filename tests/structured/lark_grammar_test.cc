// Grammars in Lark's notation (guided_grammar as vLLM also takes it) against outside
// oracles: without recursion, exactly what an equivalent regex written by hand matches in
// Python's re; with recursion and %ignore, outputs that Python's json and ast parse; and
// every mistake an Error naming it and its line.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "structured/byte_dfa.h"
#include "structured/ebnf_grammar.h"
#include "grammar_test_util.h"

namespace kestrel::structured {
namespace {

using testing::dfa_accepts;
using testing::RegularCase;

ByteDfa dfa_of(const std::string& grammar) { return testing::grammar_dfa(grammar); }


TEST(LarkGrammar, RegularGrammarsAcceptWhatTheirRegexMatches) {
  const std::string id = "[a-zA-Z_][a-zA-Z0-9_]*";
  const std::string ws = "[ \\t\\f\\r\\n]*";
  const std::string g = "([hH][iI]|0[xX][0-9a-fA-F]+|[a-f])";
  const std::vector<RegularCase> cases = {
      // The SQL grammar of vLLM's structured-outputs documentation, in Lark.
      {R"g(?start: select_statement
?select_statement: "SELECT " column_list " FROM " table_name
?column_list: column_name ("," column_name)*
?table_name: identifier
?column_name: identifier
?identifier: /[a-zA-Z_][a-zA-Z0-9_]*/)g",
       "SELECT " + id + "(," + id + ")* FROM " + id, {"SELECT a,b_2 FROM t"}},
      // %import (with an alias and a list) and %ignore: whitespace between tokens, not in them.
      {R"g(start: "let" NAME "=" NUMBER ";"
%import common.CNAME -> NAME
%import common (NUMBER, WS)
%ignore WS)g",
       ws + "let" + ws + "[_A-Za-z][_A-Za-z0-9]*" + ws + "=" + ws +
           "([0-9]+[eE][+-]?[0-9]+|([0-9]+\\.[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+)" + ws + ";" + ws,
       {"let x = 1.5e3;", " let\tx_1=2 ;\n"}},
      // The i flag on strings and regexes, a range, [optional], ~ counts, an alias, comments,
      // a terminal's priority and a rule's !.
      {R"g(// greetings
start: greeting ("," greeting)~1..2 [ "!" ] -> top
!greeting: "hi"i | HEX   // either case
HEX.2: /0x[0-9a-f]+/i | "a".."f")g",
       g + "(," + g + "){1,2}!?", {"Hi,0XfF", "a,hI,b!"}},
  };
  std::mt19937 rng(29);
  testing::expect_same_language(cases, rng);
}

TEST(LarkGrammar, JsonWithIgnoredWhitespaceParsesInPython) {
  const std::string json = R"g(?start: value
?value: object | array | STRING | NUMBER | "true" | "false" | "null"
array: "[" [value ("," value)*] "]"
object: "{" [pair ("," pair)*] "}"
pair: STRING ":" value
STRING: /"([^"\\\x00-\x1f]|\\["\\\/bfnrt]|\\u[0-9a-fA-F]{4})*"/
NUMBER: /-?(0|[1-9][0-9]{0,15})(\.[0-9]{1,16})?([eE][-+]?[0-9]{1,2})?/
WS: /[ \t\n\r]+/
%ignore WS)g";
  EXPECT_TRUE(EbnfGrammar::parse(json).recursive());
  const std::vector<std::string> texts = testing::grammar_outputs(json, 40, 7);
  ASSERT_GE(texts.size(), 20u);
  const std::vector<bool> py = testing::python_predicate("lambda t: parses(json.loads, t)", texts);
  int spaced = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_TRUE(py[i]) << kestrel::testing::escaped(texts[i]);
    spaced += texts[i].find_first_of(" \t\n\r") != std::string::npos;
  }
  EXPECT_GT(spaced, 0);  // the ignored whitespace does come out
  const ByteDfa dfa = dfa_of(json);
  EXPECT_TRUE(dfa_accepts(dfa, " [ 1 , {\"a\" :\n\"b\"} ]\t"));
  EXPECT_FALSE(dfa_accepts(dfa, "[tr ue]"));  // no whitespace inside a token
  EXPECT_FALSE(dfa_accepts(dfa, "[\"a b\" \"c\"]"));
}

TEST(LarkGrammar, ExpressionsWithIgnoredSpacesParseInPython) {
  const std::string expr = R"g(?start: sum
?sum: product | sum "+" product | sum "-" product
?product: atom | product "*" atom
?atom: NUM | "(" sum ")" | "-" atom
NUM: /0|[1-9][0-9]{0,3}/
%import common.WS_INLINE
%ignore WS_INLINE)g";
  const std::vector<std::string> texts = testing::grammar_outputs(expr, 40, 13);
  ASSERT_GE(texts.size(), 20u);
  // Python's eval mode refuses a leading indent; what follows it must parse.
  const std::vector<bool> py = testing::python_predicate(
      "lambda t: parses(lambda s: ast.parse(s.lstrip(' \\t'), mode='eval'), t)", texts);
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_TRUE(py[i]) << kestrel::testing::escaped(texts[i]);
}

TEST(LarkGrammar, MistakesAreNamedWithTheirPlace) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"start: item\nitem: thing", "rule 'thing' is used but not defined at line 2, column 7"},
      {"begin: \"a\"", "there is no rule 'start'"},
      {"start: \"a\"\n%import foo.BAR", "only Lark's common module can be imported, not 'foo.BAR'"},
      {"start: X\n%import common.NOPE -> X", "common.NOPE is not one of the common terminals"},
      {"start: \"a\"\n%declare X", "%declare is not supported"},
      {"start: _sep{\"a\"}", "templates are not supported"},
      {"start: /a/s", "the regex flag 's' is not supported"},
      {"start: \"x\" /(?=a)b/", "lookahead is not supported at offset 2 of '(?=a)b' at line 1, column 12"},
      {"start: /abc", "regex without its closing '/'"},
      {"start: \"ab\"..\"c\"", "between single characters"},
      {"start: \"z\"..\"a\"", "a range runs backwards"},
      {"start: \"a\" ~ 3..1", "runs backwards"},
      {"start: [\"a\"", "'[' without ']'"},
      {"start: \"a\"\nstart: \"b\"", "rule 'start' is defined twice (first at line 1, column 1) at line 2, column 1"},
      {"start: 'a'", "double quotes"},
  };
  testing::expect_parse_errors(bad);
}

// Grammars with random bytes deleted, repeated or replaced (by the notations' own symbols,
// mostly) either parse and compile or throw kestrel::Error: never a crash, a hang or
// another exception.
TEST(GrammarFuzz, MutatedGrammarsParseOrFailCleanly) {
  const std::vector<std::string> seeds = {
      "root ::= item (\",\" item)*\nitem ::= [a-z]+ | \"(\" root \")\" # nested\n",
      "root ::= \"\\x41\\u00e9\" . [^\\n\"]{2,3} x?\nx ::= \"a\" | | \"b\"{1,}",
      "?start: sum\n?sum: sum \"+\" NUM | NUM\nNUM: /[0-9]{1,3}/i\n%import common.WS\n%ignore WS",
      "start: a ~ 2..3 [\"b\"..\"d\"] -> x\na: \"q\"i | (A)*\nA.2: /x+/ // c\n",
  };
  const std::string symbols = "\"'[]()|*+?{},.:=~/\\#%^-!<>\n ia0";
  std::mt19937 rng(41);
  int parsed = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string g = seeds[i % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 2);
    for (int e = 0; e < edits && !g.empty(); ++e) {
      const size_t at = rng() % g.size();
      switch (rng() % 3) {
        case 0: g.erase(at, 1 + rng() % 3); break;
        case 1: g.insert(at, 1, symbols[rng() % symbols.size()]); break;
        default: g[at] = rng() % 4 == 0 ? static_cast<char>(rng() % 256) : symbols[rng() % symbols.size()];
      }
    }
    try {
      const EbnfGrammar grammar = EbnfGrammar::parse(g);
      ++parsed;
      (void)ByteDfa::build(grammar.pattern(2), 5000);
    } catch (const Error&) {
      // a named mistake, an automaton too large or matching nothing: all fine
    }
  }
  EXPECT_GT(parsed, 2000);  // the mutations leave many grammars valid, so compiling is fuzzed too
}

}  // namespace
}  // namespace kestrel::structured
