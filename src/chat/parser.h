// Recursive-descent parser following jinja2's grammar and operator precedence:
//
//   condexpr:  or ('if' or ('else' condexpr)?)*
//   or/and/not, compare (chained, 'in', 'not in'), + -, ~, * / // %, ** (left-assoc),
//   unary - + (binds tighter than **), primary with postfix . [] () and then | filters
//   and `is` tests (so `a + b | f` filters b, and `not x is defined` negates the test).
//
// Statements: if/elif/else, for (else, `if` filter), set (incl. namespace attributes and
// block set), macro, call, filter, with, break/continue (loopcontrols), and Hugging Face's
// `generation` tag. Unknown filters and tests are rejected at parse time, like jinja2 does.
#pragma once

#include <string>
#include <vector>

#include "chat/ast.h"
#include "chat/lexer.h"

namespace kestrel::chat {

// Throws TemplateError (with line and column) on a syntax error.
StmtList parse_template(const std::string& source);

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  StmtList parse();

  // Expressions (parser_expr.cc).
  ExprPtr parse_expression(bool with_condexpr = true);
  ExprPtr parse_tuple(bool with_condexpr = true, const std::vector<std::string>& extra_end = {},
                      bool explicit_parens = false);

 private:
  // Token stream.
  const Token& current() const { return tokens_[pos_]; }
  const Token& look() const { return tokens_[pos_ + 1 < tokens_.size() ? pos_ + 1 : pos_]; }
  const Token& advance() { return tokens_[pos_ < tokens_.size() - 1 ? pos_++ : pos_]; }
  bool at_op(const char* op) const;
  bool at_name(const char* name) const;
  bool skip_op(const char* op);
  bool skip_name(const char* name);
  const Token& expect_op(const char* op);
  const Token& expect_name();
  void expect(TokenKind kind, const char* what);
  [[noreturn]] void fail(const Token& at, const std::string& message) const;
  std::string describe(const Token& t) const;

  // Statements (parser.cc).
  StmtList subparse(const std::vector<std::string>& end_tags);
  StmtList parse_body(const std::vector<std::string>& end_tags, bool drop_end_tag);
  StmtPtr parse_statement();
  StmtPtr parse_if(const Token& start);
  StmtPtr parse_for(const Token& start);
  StmtPtr parse_set(const Token& start);
  StmtPtr parse_macro(const Token& start);
  StmtPtr parse_call_block(const Token& start);
  StmtPtr parse_filter_block(const Token& start);
  StmtPtr parse_with(const Token& start);
  void parse_signature(Stmt& stmt);
  std::vector<std::string> parse_assign_names(bool* unpack, const std::vector<std::string>& extra_end);

  // Expression levels (parser_expr.cc).
  ExprPtr parse_condexpr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter = true);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_subscribed();
  ExprPtr parse_call(ExprPtr node);
  Arguments parse_call_args();
  ExprPtr parse_filter(ExprPtr node, bool start_inline);
  ExprPtr parse_test(ExprPtr node);
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr make(ExprKind kind, const Token& at) const;
  ExprPtr binary(ExprPtr left, ExprPtr right, BinaryOp op, const Token& at) const;
  // Appends `child` (may be null) to node's children and keeps node.depth; fails past
  // kMaxExprDepth. absorb_args does the same for node.args; deepen counts one child.
  void deepen(Expr& node, const Expr* child) const;
  void attach(Expr& node, ExprPtr child) const;
  void absorb_args(Expr& node) const;

  // One more level of source nesting for its lifetime; fails past kMaxNesting.
  class Nested {
   public:
    Nested(Parser& p, const Token& at);
    ~Nested() { --parser_.nesting_; }
    Nested(const Nested&) = delete;
    Nested& operator=(const Nested&) = delete;

   private:
    Parser& parser_;
  };

  bool is_tuple_end(const std::vector<std::string>& extra_end) const;

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int nesting_ = 0;
};

}  // namespace kestrel::chat
