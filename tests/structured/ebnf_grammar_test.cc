// GBNF grammars (guided_grammar) against outside oracles: a grammar without recursion
// accepts exactly what an equivalent regex written by hand matches in Python's re; the
// outputs of recursive grammars (JSON, arithmetic, nested lists) parse with Python's json
// and ast; nesting stops at the limit; every mistake is an Error naming it and its line.
#include "structured/ebnf_grammar.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "structured/byte_dfa.h"
#include "grammar_test_util.h"

namespace kestrel::structured {
namespace {

using testing::dfa_accepts;
using testing::RegularCase;
using testing::samples;

ByteDfa dfa_of(const std::string& grammar, int nesting = kGrammarNestings[0]) {
  return testing::grammar_dfa(grammar, nesting);
}


TEST(EbnfGrammar, RegularGrammarsAcceptWhatTheirRegexMatches) {
  const std::string move = "([a-h][1-8]|O-O(-O)?)[+#]?";
  const std::vector<RegularCase> cases = {
      // vLLM's documented example.
      {R"g(root ::= select_statement
select_statement ::= "SELECT " column " from " table " where " condition
column ::= "col_1 " | "col_2 "
table ::= "table_1 " | "table_2 "
condition ::= column "= " number
number ::= "1 " | "2 ")g",
       "SELECT col_[12]  from table_[12]  where col_[12] = [12] ",
       {"SELECT col_1  from table_2  where col_2 = 1 "}},
      // Comments, rules over several lines, an empty alternative, counts, negated classes.
      {R"g(# a list of moves
root ::= "1. " move " " move "\n"
    ([1-9] [0-9]? ". " move " " move "\n")+
move ::= (pawn | castle) [+#]?   # check or mate
pawn ::= [a-h] [1-8]
castle ::= "O-O" ("-O")?)g",
       "1\\. " + move + " " + move + "\\n([1-9][0-9]?\\. " + move + " " + move + "\\n)+",
       {"1. e4 e5\n2. O-O-O# a1+\n"}},
      {R"g(root ::= space "[" item{2,3} "]"
item ::= [^\]\n"\\]{1,2} ","
space ::= | " " | "\t\t")g",
       R"g((| |\t\t)\[([^\]\n"\\]{1,2},){2,3}\])g", {"[ab,c,]", " [é,😀x,!,]"}},
      // Escapes of every width, '.', ranges of non-ASCII code points, classes with '-' and '^'.
      {R"g(root ::= "\x41\u00e9\U0001F600" . [à-ÿ]+ [-+^]{0,2} [\-\^a-c]* "\"\\\'\[\]")g",
       R"g(Aé😀[\s\S][à-ÿ]+[-+^]{0,2}[-^a-c]*"\\'\[\])g", {"Aé😀\nàÿ+^a-c\"\\'[]"}},
      // X (S X)* as one list, with a count on the repetition.
      {R"g(root ::= word ("," " "? word){1,2}
word ::= [a-z]+)g",
       "[a-z]+(, ?[a-z]+){1,2}", {"a, b", "x,y,z"}},
  };
  std::mt19937 rng(23);
  testing::expect_same_language(cases, rng);
}

TEST(EbnfGrammar, JsonGrammarWritesJson) {
  const std::string json = R"g(root ::= value
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws (member ("," ws member)*)? "}" ws
member ::= string ":" ws value
array ::= "[" ws (value ("," ws value)*)? "]" ws
string ::= "\"" ([^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))* "\"" ws
number ::= "-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})? ws
ws ::= [ \t\n]{0,2})g";
  EXPECT_TRUE(EbnfGrammar::parse(json).recursive());
  // Through the compiler and Qwen3's vocabulary, as a request compiles it: token walks.
  const std::vector<std::string> texts = testing::grammar_outputs(json, 40, 5);
  ASSERT_GE(texts.size(), 20u);
  const std::vector<bool> py = testing::python_predicate("lambda t: parses(json.loads, t)", texts);
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_TRUE(py[i]) << kestrel::testing::escaped(texts[i]);
  // Values nested as deep as the first nesting tried (n - 2 lists, an object, its value),
  // and not deeper.
  const int n = kGrammarNestings[0];
  std::string deep = std::string(n - 2, '[') + "{\"a\": 1}" + std::string(n - 2, ']');
  const ByteDfa dfa = dfa_of(json);
  EXPECT_TRUE(dfa_accepts(dfa, deep)) << deep;
  EXPECT_FALSE(dfa_accepts(dfa, "[" + deep + "]"));
  EXPECT_TRUE(dfa_accepts(dfa, "[1, \"x\\u00e9\", {\"k\": [true, null]}, -0.5e+10]"));
}

// The shape JSON grammars for llama.cpp are commonly written in: white space as a right
// recursion, an object's members spelt out twice around their comma (the list is found
// with a separator of several items), multi-line rules.
TEST(EbnfGrammar, JsonInTheCommonGbnfShapeWritesJson) {
  const std::string json = R"g(root ::= object
value ::= object | array | string | number | ("true" | "false" | "null") ws
object ::=
  "{" ws (
    string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws
array ::= "[" ws (value ("," ws value)*)? "]" ws
string ::= "\"" ([^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})? ws
ws ::= ([ \t\n] ws)?)g";
  const std::vector<std::string> texts = testing::grammar_outputs(json, 60, 9);
  ASSERT_GE(texts.size(), 15u);  // walks that end within 300 tokens
  const std::vector<bool> py = testing::python_predicate(
      "lambda t: parses(json.loads, t) and isinstance(json.loads(t), dict)", texts);
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_TRUE(py[i]) << kestrel::testing::escaped(texts[i]);
  const ByteDfa dfa = dfa_of(json);
  EXPECT_TRUE(dfa_accepts(dfa, "{ \"a\" :  [1, {}], \"b\":\n\"c\" }"));
  // ws refers to itself only at its end: a repetition, as long as it likes.
  EXPECT_TRUE(dfa_accepts(dfa, "{" + std::string(40, ' ') + "}"));
}

// Rules that refer to themselves only at their ends are repetitions, exactly: no nesting
// limit applies (Arden's rule: X ::= a X | b is a* b).
TEST(EbnfGrammar, RecursionAtTheEndIsRepetition) {
  const std::vector<RegularCase> cases = {
      {"root ::= ws \"x\" ws\nws ::= ([ \\t] ws)?", "[ \\t]*x[ \\t]*", {std::string(30, ' ') + "x\t"}},
      {R"g(root ::= list
list ::= item ("," list)?
item ::= [a-z]{1,3})g",
       "[a-z]{1,3}(,[a-z]{1,3})*", {"a,bb,ccc,d,e,f,g,h,i"}},
      {R"g(root ::= "<" digits ">"
digits ::= [0-9] digits | [0-9] | "-" digits)g",
       "<[-0-9]*[0-9]>", {"<-1-2-345678901234>"}},
  };
  std::mt19937 rng(31);
  testing::expect_same_language(cases, rng, /*recursive=*/true);
}

TEST(EbnfGrammar, LeftRecursiveExpressionsParseInPython) {
  const std::string expr = R"g(root ::= expr
expr ::= expr ("+" | "-") term | term
term ::= term "*" factor | factor
factor ::= "0" | [1-9] [0-9]{0,3} | "(" expr ")")g";
  std::mt19937 rng(11);
  for (int nesting : {1, 3}) {
    const ByteDfa dfa = dfa_of(expr, nesting);
    std::vector<std::string> texts;
    for (int i = 0; i < 80; ++i) {
      std::string s = testing::walk(dfa, rng);
      if (!s.empty()) texts.push_back(std::move(s));
    }
    const std::vector<bool> py =
        testing::python_predicate("lambda t: parses(lambda s: ast.parse(s, mode='eval'), t)", texts);
    for (size_t i = 0; i < texts.size(); ++i) EXPECT_TRUE(py[i]) << texts[i];
    // `nesting` terms in a row (expr expands into itself that many times), not one more.
    std::string terms = "1";
    for (int k = 1; k < nesting; ++k) terms += "+1";
    EXPECT_TRUE(dfa_accepts(dfa, terms)) << terms;
    EXPECT_FALSE(dfa_accepts(dfa, terms + "+1")) << terms;
  }
}

TEST(EbnfGrammar, NestingStopsAtTheLimit) {
  const std::string lists = R"g(root ::= item*
item ::= "(" item* ")")g";
  const ByteDfa dfa = dfa_of(lists, 3);
  EXPECT_TRUE(dfa_accepts(dfa, ""));
  EXPECT_TRUE(dfa_accepts(dfa, "((()))()(()())"));
  EXPECT_FALSE(dfa_accepts(dfa, "(((())))"));
  EXPECT_FALSE(dfa_accepts(dfa, "(()"));
  std::mt19937 rng(3);
  std::vector<std::string> texts = samples(dfa, rng);
  // Balanced, at most 3 deep: Python's own count.
  const std::vector<bool> py = testing::python_predicate(
      "lambda t: set(t) <= set('()') and all(t[:i].count('(') - t[:i].count(')') in range(4) "
      "for i in range(len(t) + 1)) and t.count('(') == t.count(')')",
      texts);
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(dfa_accepts(dfa, texts[i]), py[i]) << texts[i];
}

TEST(EbnfGrammar, CompilerTakesTheDeepestNestingThatFits) {
  // Eight subtrees a level: 8^5 copies at the first nesting tried, too large an automaton;
  // the compiler falls back to a shallower one instead of refusing the grammar.
  const std::string wide = R"g(root ::= t
t ::= "a" | "(" t t t t t t t t ")")g";
  EXPECT_THROW(dfa_of(wide, kGrammarNestings[0]), PatternTooLarge);
  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kGrammar;
  spec.grammar = wide;
  GrammarCompiler compiler(std::make_shared<const VocabTrie>(std::vector<std::string>{"a", "(", ")"}, 3));
  const auto g = compiler.compile(spec);
  const std::string eight_a = "(aaaaaaaa)";
  EXPECT_TRUE(dfa_accepts(g->dfa(), "a"));
  EXPECT_TRUE(dfa_accepts(g->dfa(), eight_a));
  EXPECT_TRUE(dfa_accepts(g->dfa(), "(aaaaaaa" + eight_a + ")"));
  // A grammar without recursion that is too large is refused, naming the limit.
  spec.grammar = "root ::= [ab]* \"a\" [ab]{15}";  // a DFA remembers the last 16 letters
  EXPECT_THROW(compiler.compile(spec), PatternTooLarge);
}

TEST(EbnfGrammar, MistakesAreNamedWithTheirPlace) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "grammar: is empty"},
      {"  # only a comment\n", "grammar: is empty"},
      {"root ::= \"a\"\nroot ::= \"b\"", "rule 'root' is defined twice (first at line 1, column 1) at line 2, column 1"},
      {"root ::= \"a\"\nx ::= y", "rule 'y' is used but not defined at line 2, column 7"},
      {"start ::= \"a\"", "there is no rule 'root'"},
      {"root ::= \"abc\n", "string without its closing"},
      {"root ::= \"\\q\"", "unknown escape '\\q' at line 1, column 11"},
      {"root ::= (\"a\" | \"b\"", "'(' without ')' at line 1, column 10"},
      {"root ::= \"a\")", "')' without '('"},
      {"root ::= [z-a]", "a class range runs backwards"},
      {"root ::= []", "an empty class"},
      {"root ::= \"a\"{3,1}", "maximum below its minimum"},
      {"root ::= \"a\"{5000}", "counts above 1000"},
      {"root ::= \"a\"{2", "expected '}'"},
      {"root: \"a\"", "there is no rule 'start' (in Lark, the whole output matches start)"},
      {"root ::= <think> \"a\"", "token matches"},
      {"root ::= 'a'", "double quotes"},
      {"root ::= \"\\uD800\"", "U+D800, which is not a character"},
      {"root ::= \"\\x4\"", "needs 2 hex digits"},
      {"root ::= \"a\" @", "unexpected '@'"},
      {"root ::= \"\xFF\"", "invalid UTF-8 at line 1, column 11"},
      {"root ::= \"\xED\xA0\x80\"", "invalid UTF-8"},  // a surrogate's encoding
  };
  testing::expect_parse_errors(bad);
  // Parsed, but no finite string matches: every alternative nests without end.
  try {
    dfa_of("root ::= \"(\" root \")\"");
    ADD_FAILURE() << "built";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("matches no string"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kestrel::structured
