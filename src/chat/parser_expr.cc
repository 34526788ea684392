// Expression grammar; precedence and associativity follow jinja2's parser.py.
#include <algorithm>

#include <fmt/format.h>

#include "chat/builtins.h"
#include "chat/limits.h"
#include "chat/parser.h"
#include "chat/template_error.h"

namespace kestrel::chat {

ExprPtr Parser::make(ExprKind kind, const Token& at) const {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = at.line;
  e->column = at.column;
  return e;
}

ExprPtr Parser::binary(ExprPtr left, ExprPtr right, BinaryOp op, const Token& at) const {
  ExprPtr node = make(ExprKind::kBinary, at);
  node->op = op;
  attach(*node, std::move(left));
  attach(*node, std::move(right));
  return node;
}

void Parser::deepen(Expr& node, const Expr* child) const {
  if (child == nullptr || child->depth + 1 <= node.depth) return;
  node.depth = child->depth + 1;
  if (node.depth > kMaxExprDepth) {
    throw TemplateError(fmt::format("expression nested too deeply (over {} levels)", kMaxExprDepth),
                        node.line, node.column, false);
  }
}

void Parser::attach(Expr& node, ExprPtr child) const {
  deepen(node, child.get());
  node.children.push_back(std::move(child));
}

void Parser::absorb_args(Expr& node) const {
  for (const ExprPtr& e : node.args.positional) deepen(node, e.get());
  for (const auto& [name, e] : node.args.keyword) deepen(node, e.get());
  deepen(node, node.args.star.get());
  deepen(node, node.args.double_star.get());
}

Parser::Nested::Nested(Parser& p, const Token& at) : parser_(p) {
  if (++parser_.nesting_ > kMaxNesting) {
    --parser_.nesting_;
    throw TemplateError(fmt::format("template nested too deeply (over {} levels)", kMaxNesting),
                        at.line, at.column, false);
  }
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  const Nested level(*this, current());
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr Parser::parse_condexpr() {
  ExprPtr expr = parse_or();
  while (at_name("if")) {
    const Token& at = advance();
    auto cond = make(ExprKind::kCondition, at);
    ExprPtr test = parse_or();
    ExprPtr otherwise = skip_name("else") ? parse_condexpr() : nullptr;
    attach(*cond, std::move(expr));
    attach(*cond, std::move(test));
    attach(*cond, std::move(otherwise));
    expr = std::move(cond);
  }
  return expr;
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (at_name("or")) {
    auto node = make(ExprKind::kOr, advance());
    attach(*node, std::move(left));
    attach(*node, parse_and());
    left = std::move(node);
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (at_name("and")) {
    auto node = make(ExprKind::kAnd, advance());
    attach(*node, std::move(left));
    attach(*node, parse_not());
    left = std::move(node);
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (at_name("not")) {
    const Nested level(*this, current());
    auto node = make(ExprKind::kNot, advance());
    attach(*node, parse_not());
    return node;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const Token& start = current();
  ExprPtr first = parse_math1();
  std::vector<CompareOp> ops;
  std::vector<ExprPtr> operands;
  while (true) {
    static const std::pair<const char*, CompareOp> kOps[] = {
        {"==", CompareOp::kEq}, {"!=", CompareOp::kNe}, {"<", CompareOp::kLt},
        {"<=", CompareOp::kLe}, {">", CompareOp::kGt},  {">=", CompareOp::kGe}};
    auto it = std::find_if(std::begin(kOps), std::end(kOps), [&](const auto& op) { return at_op(op.first); });
    if (it != std::end(kOps)) {
      advance();
      ops.push_back(it->second);
    } else if (at_name("in")) {
      advance();
      ops.push_back(CompareOp::kIn);
    } else if (at_name("not") && look().kind == TokenKind::kName && look().text == "in") {
      advance();
      advance();
      ops.push_back(CompareOp::kNotIn);
    } else {
      break;
    }
    operands.push_back(parse_math1());
  }
  if (ops.empty()) return first;
  auto node = make(ExprKind::kCompare, start);
  node->compare_ops = std::move(ops);
  attach(*node, std::move(first));
  for (ExprPtr& e : operands) attach(*node, std::move(e));
  return node;
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (at_op("+") || at_op("-")) {
    const Token& at = advance();
    BinaryOp op = at.text == "+" ? BinaryOp::kAdd : BinaryOp::kSub;
    left = binary(std::move(left), parse_concat(), op, at);
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  const Token& start = current();
  ExprPtr first = parse_math2();
  if (!at_op("~")) return first;
  auto node = make(ExprKind::kConcat, start);
  attach(*node, std::move(first));
  while (skip_op("~")) attach(*node, parse_math2());
  return node;
}

ExprPtr Parser::parse_math2() {
  ExprPtr left = parse_pow();
  while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
    const Token& at = advance();
    BinaryOp op = at.text == "*"   ? BinaryOp::kMul
                  : at.text == "/" ? BinaryOp::kDiv
                  : at.text == "//" ? BinaryOp::kFloorDiv
                                    : BinaryOp::kMod;
    left = binary(std::move(left), parse_pow(), op, at);
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary();
  while (at_op("**")) {
    const Token& at = advance();
    left = binary(std::move(left), parse_unary(), BinaryOp::kPow, at);
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  ExprPtr node;
  if (at_op("-") || at_op("+")) {
    const Nested level(*this, current());
    const Token& at = advance();
    node = make(at.text == "-" ? ExprKind::kNeg : ExprKind::kPos, at);
    attach(*node, parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr Parser::parse_primary() {
  const Token& t = current();
  ExprPtr node;
  switch (t.kind) {
    case TokenKind::kName:
      node = make(ExprKind::kLiteral, t);
      if (t.text == "true" || t.text == "True") node->literal = Value::boolean(true);
      else if (t.text == "false" || t.text == "False") node->literal = Value::boolean(false);
      else if (t.text == "none" || t.text == "None") node->literal = Value::none();
      else {
        node->kind = ExprKind::kName;
        node->name = t.text;
      }
      advance();
      return node;
    case TokenKind::kString: {
      std::string text;
      node = make(ExprKind::kLiteral, t);
      while (current().kind == TokenKind::kString) text += advance().text;  // adjacent literals join
      node->literal = Value::string(std::move(text));
      return node;
    }
    case TokenKind::kInteger:
      node = make(ExprKind::kLiteral, t);
      node->literal = Value::integer(advance().int_value);
      return node;
    case TokenKind::kFloat:
      node = make(ExprKind::kLiteral, t);
      node->literal = Value::number(advance().float_value);
      return node;
    case TokenKind::kOperator:
      if (t.text == "(") {
        advance();
        node = parse_tuple(true, {}, true);
        expect_op(")");
        return node;
      }
      if (t.text == "[") return parse_list();
      if (t.text == "{") return parse_dict();
      break;
    default: break;
  }
  fail(t, "unexpected " + describe(t));
}

bool Parser::is_tuple_end(const std::vector<std::string>& extra_end) const {
  const Token& t = current();
  if (t.kind == TokenKind::kVariableEnd || t.kind == TokenKind::kBlockEnd || at_op(")")) return true;
  return t.kind == TokenKind::kName && std::find(extra_end.begin(), extra_end.end(), t.text) != extra_end.end();
}

ExprPtr Parser::parse_tuple(bool with_condexpr, const std::vector<std::string>& extra_end, bool explicit_parens) {
  const Token& start = current();
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) expect_op(",");
    if (is_tuple_end(extra_end)) break;
    items.push_back(parse_expression(with_condexpr));
    if (at_op(",")) is_tuple = true;
    else break;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) fail(current(), "Expected an expression, got " + describe(current()));
  }
  auto node = make(ExprKind::kTuple, start);
  node->children = std::move(items);
  return node;
}

ExprPtr Parser::parse_list() {
  auto node = make(ExprKind::kList, expect_op("["));
  while (!at_op("]")) {
    if (!node->children.empty()) expect_op(",");
    if (at_op("]")) break;
    attach(*node, parse_expression());
  }
  expect_op("]");
  return node;
}

ExprPtr Parser::parse_dict() {
  auto node = make(ExprKind::kDict, expect_op("{"));
  while (!at_op("}")) {
    if (!node->children.empty()) expect_op(",");
    if (at_op("}")) break;
    attach(*node, parse_expression());
    expect_op(":");
    attach(*node, parse_expression());
  }
  expect_op("}");
  return node;
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (at_op(".") || at_op("[")) node = parse_subscript(std::move(node));
    else if (at_op("(")) node = parse_call(std::move(node));
    else return node;
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (at_op("|")) node = parse_filter(std::move(node), false);
    else if (at_name("is")) node = parse_test(std::move(node));
    else if (at_op("(")) node = parse_call(std::move(node));
    else return node;
  }
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
  const Token& at = advance();
  if (at.text == ".") {
    const Token& attr = advance();
    if (attr.kind == TokenKind::kName) {
      auto e = make(ExprKind::kAttr, at);
      e->name = attr.text;
      attach(*e, std::move(node));
      return e;
    }
    if (attr.kind != TokenKind::kInteger) fail(attr, "expected name or number");
    auto e = make(ExprKind::kItem, at);
    auto index = make(ExprKind::kLiteral, attr);
    index->literal = Value::integer(attr.int_value);
    attach(*e, std::move(node));
    attach(*e, std::move(index));
    return e;
  }
  std::vector<ExprPtr> args;
  while (!at_op("]")) {
    if (!args.empty()) expect_op(",");
    args.push_back(parse_subscribed());
  }
  expect_op("]");
  if (args.size() == 1 && args[0]->kind == ExprKind::kSlice && !args[0]->children.empty() &&
      args[0]->children[0] == nullptr) {
    args[0]->children[0] = std::move(node);  // parse_subscribed leaves the target slot empty
    return std::move(args[0]);
  }
  auto e = make(ExprKind::kItem, at);
  attach(*e, std::move(node));
  for (const ExprPtr& arg : args) {
    if (arg->kind == ExprKind::kSlice) fail(at, "a slice inside a subscript tuple is not supported");
  }
  if (args.size() == 1) {
    attach(*e, std::move(args[0]));
  } else {  // several subscripts, or none (`x[]`), index with a tuple as in jinja2
    auto tuple = make(ExprKind::kTuple, at);
    tuple->children = std::move(args);
    attach(*e, std::move(tuple));
  }
  return e;
}

// One subscript: an expression or a slice `a:b:c` (returned as kSlice with an empty target).
ExprPtr Parser::parse_subscribed() {
  const Token& start = current();
  ExprPtr first;
  if (!at_op(":")) {
    first = parse_expression();
    if (!at_op(":")) return first;
  }
  advance();  // ':'
  auto slice = make(ExprKind::kSlice, start);
  attach(*slice, nullptr);
  attach(*slice, std::move(first));
  attach(*slice, at_op(":") || at_op("]") || at_op(",") ? nullptr : parse_expression());
  if (skip_op(":")) {
    attach(*slice, at_op("]") || at_op(",") ? nullptr : parse_expression());
  } else {
    attach(*slice, nullptr);
  }
  return slice;
}

Arguments Parser::parse_call_args() {
  const Token& open = expect_op("(");
  Arguments args;
  bool require_comma = false;
  auto ensure = [&](bool ok) {
    if (!ok) fail(open, "invalid syntax for function call expression");
  };
  while (!at_op(")")) {
    if (require_comma) {
      expect_op(",");
      if (at_op(")")) break;
    }
    if (skip_op("*")) {
      ensure(!args.star && !args.double_star);
      args.star = parse_expression();
    } else if (skip_op("**")) {
      ensure(!args.double_star);
      args.double_star = parse_expression();
    } else if (current().kind == TokenKind::kName && look().kind == TokenKind::kOperator && look().text == "=") {
      ensure(!args.double_star);
      std::string key = advance().text;
      advance();
      args.keyword.emplace_back(key, parse_expression());
    } else {
      ensure(!args.star && !args.double_star && args.keyword.empty());
      args.positional.push_back(parse_expression());
    }
    require_comma = true;
  }
  expect_op(")");
  return args;
}

ExprPtr Parser::parse_call(ExprPtr node) {
  auto call = make(ExprKind::kCall, current());
  call->args = parse_call_args();
  absorb_args(*call);
  attach(*call, std::move(node));
  return call;
}

ExprPtr Parser::parse_filter(ExprPtr node, bool start_inline) {
  while (at_op("|") || start_inline) {
    if (!start_inline) advance();
    start_inline = false;
    const Token& name_token = expect_name();
    std::string name = name_token.text;
    while (skip_op(".")) name += "." + expect_name().text;
    if (find_filter(name) == nullptr) fail(name_token, "No filter named '" + name + "'.");
    auto filter = make(ExprKind::kFilter, name_token);
    filter->name = name;
    if (at_op("(")) filter->args = parse_call_args();
    absorb_args(*filter);
    attach(*filter, std::move(node));
    node = std::move(filter);
  }
  return node;
}

ExprPtr Parser::parse_test(ExprPtr node) {
  const Token& is_token = advance();
  bool negated = skip_name("not");
  const Token& name_token = expect_name();
  std::string name = name_token.text;
  while (skip_op(".")) name += "." + expect_name().text;
  if (find_test(name) == nullptr) fail(name_token, "No test named '" + name + "'.");
  auto test = make(ExprKind::kTest, is_token);
  test->name = name;
  const Token& t = current();
  bool argument_follows = t.kind == TokenKind::kName || t.kind == TokenKind::kString ||
                          t.kind == TokenKind::kInteger || t.kind == TokenKind::kFloat ||
                          at_op("(") || at_op("[") || at_op("{");
  if (at_op("(")) {
    test->args = parse_call_args();
  } else if (argument_follows && !at_name("else") && !at_name("or") && !at_name("and")) {
    if (at_name("is")) fail(t, "You cannot chain multiple tests with is");
    test->args.positional.push_back(parse_postfix(parse_primary()));
  }
  absorb_args(*test);
  attach(*test, std::move(node));
  if (!negated) return test;
  auto not_node = make(ExprKind::kNot, is_token);
  attach(*not_node, std::move(test));
  return not_node;
}

}  // namespace kestrel::chat
