// Statement grammar and the token-stream helpers.
#include "chat/parser.h"

#include <algorithm>

#include "chat/template_error.h"

namespace kestrel::chat {

StmtList parse_template(const std::string& source) { return Parser(tokenize(source)).parse(); }

bool Parser::at_op(const char* op) const {
  return current().kind == TokenKind::kOperator && current().text == op;
}

bool Parser::at_name(const char* name) const {
  return current().kind == TokenKind::kName && current().text == name;
}

bool Parser::skip_op(const char* op) {
  if (!at_op(op)) return false;
  advance();
  return true;
}

bool Parser::skip_name(const char* name) {
  if (!at_name(name)) return false;
  advance();
  return true;
}

const Token& Parser::expect_op(const char* op) {
  if (!at_op(op)) fail(current(), std::string("expected '") + op + "', got " + describe(current()));
  return advance();
}

const Token& Parser::expect_name() {
  if (current().kind != TokenKind::kName) fail(current(), "expected a name, got " + describe(current()));
  return advance();
}

void Parser::expect(TokenKind kind, const char* what) {
  if (current().kind != kind) fail(current(), std::string("expected ") + what + ", got " + describe(current()));
  advance();
}

void Parser::fail(const Token& at, const std::string& message) const {
  throw TemplateError(message, at.line, at.column, false);
}

std::string Parser::describe(const Token& t) const {
  switch (t.kind) {
    case TokenKind::kData: return "template text";
    case TokenKind::kVariableBegin: return "'{{'";
    case TokenKind::kVariableEnd: return "end of print statement";
    case TokenKind::kBlockBegin: return "'{%'";
    case TokenKind::kBlockEnd: return "end of statement block";
    case TokenKind::kEof: return "end of template";
    case TokenKind::kString: return "string literal";
    default: return "'" + t.text + "'";
  }
}

StmtList Parser::parse() {
  StmtList body = subparse({});
  if (current().kind != TokenKind::kEof) fail(current(), "unexpected " + describe(current()));
  return body;
}

// Parses until a `{% <end tag> %}` (left as the current token) or the end of the template.
StmtList Parser::subparse(const std::vector<std::string>& end_tags) {
  StmtList body;
  while (current().kind != TokenKind::kEof) {
    const Token& t = current();
    if (t.kind == TokenKind::kData) {
      auto out = std::make_unique<Stmt>();
      out->kind = StmtKind::kOutput;
      out->line = t.line;
      out->column = t.column;
      out->text = t.text;
      body.push_back(std::move(out));
      advance();
    } else if (t.kind == TokenKind::kVariableBegin) {
      advance();
      auto print = std::make_unique<Stmt>();
      print->kind = StmtKind::kPrint;
      print->line = current().line;
      print->column = current().column;
      print->exprs.push_back(parse_tuple());
      expect(TokenKind::kVariableEnd, "end of print statement");
      body.push_back(std::move(print));
    } else if (t.kind == TokenKind::kBlockBegin) {
      advance();
      const Token& tag = current();
      if (tag.kind == TokenKind::kName && std::find(end_tags.begin(), end_tags.end(), tag.text) != end_tags.end()) {
        return body;
      }
      body.push_back(parse_statement());
      expect(TokenKind::kBlockEnd, "end of statement block");
    } else {
      fail(t, "unexpected " + describe(t));
    }
  }
  return body;
}

// The body of a block statement: `%}` then statements up to one of `end_tags`.
StmtList Parser::parse_body(const std::vector<std::string>& end_tags, bool drop_end_tag) {
  skip_op(":");
  expect(TokenKind::kBlockEnd, "end of statement block");
  StmtList body = subparse(end_tags);
  if (current().kind == TokenKind::kEof) {
    std::string expected;
    for (const std::string& tag : end_tags) expected += (expected.empty() ? "'" : " or '") + tag + "'";
    fail(current(), "Unexpected end of template. Jinja was looking for the following tags: " + expected + ".");
  }
  if (drop_end_tag) advance();
  return body;
}

StmtPtr Parser::parse_statement() {
  const Token& tag = current();
  const Nested level(*this, tag);  // blocks inside blocks
  if (tag.kind != TokenKind::kName) fail(tag, "tag name expected");
  const std::string& name = tag.text;
  if (name == "if") return parse_if(advance());
  if (name == "for") return parse_for(advance());
  if (name == "set") return parse_set(advance());
  if (name == "macro") return parse_macro(advance());
  if (name == "call") return parse_call_block(advance());
  if (name == "filter") return parse_filter_block(advance());
  if (name == "with") return parse_with(advance());
  auto stmt = std::make_unique<Stmt>();
  stmt->line = tag.line;
  stmt->column = tag.column;
  if (name == "break" || name == "continue") {
    advance();
    stmt->kind = name == "break" ? StmtKind::kBreak : StmtKind::kContinue;
    return stmt;
  }
  if (name == "generation") {
    advance();
    stmt->kind = StmtKind::kScope;
    stmt->bodies.push_back(parse_body({"endgeneration"}, true));
    return stmt;
  }
  if (name == "print") {
    advance();
    stmt->kind = StmtKind::kPrint;
    stmt->exprs.push_back(parse_tuple());
    return stmt;
  }
  static const char* kUnsupported[] = {"block", "extends", "include", "import", "from", "autoescape", "do"};
  for (const char* unsupported : kUnsupported) {
    if (name == unsupported) fail(tag, "the '" + name + "' tag is not supported in chat templates");
  }
  fail(tag, "Encountered unknown tag '" + name + "'.");
}

StmtPtr Parser::parse_if(const Token& start) {
  auto stmt = std::make_unique<Stmt>();
  stmt->kind = StmtKind::kIf;
  stmt->line = start.line;
  stmt->column = start.column;
  while (true) {
    stmt->exprs.push_back(parse_tuple(false));
    stmt->bodies.push_back(parse_body({"elif", "else", "endif"}, false));
    std::string tag = advance().text;
    if (tag == "elif") continue;
    if (tag == "else") {
      stmt->bodies.push_back(parse_body({"endif"}, true));
    } else {
      stmt->bodies.emplace_back();
    }
    return stmt;
  }
}

std::vector<std::string> Parser::parse_assign_names(bool* unpack, const std::vector<std::string>& extra_end) {
  std::vector<std::string> names;
  *unpack = false;
  bool parenthesized = skip_op("(");
  while (true) {
    const Token& t = expect_name();
    if (t.text == "true" || t.text == "false" || t.text == "none" || t.text == "True" ||
        t.text == "False" || t.text == "None") {
      fail(t, "can't assign to const");
    }
    names.push_back(t.text);
    if (!skip_op(",")) break;
    *unpack = true;
    if ((parenthesized && at_op(")")) || is_tuple_end(extra_end) || at_op("=")) break;
  }
  if (parenthesized) {
    expect_op(")");
    *unpack = true;
  }
  return names;
}

StmtPtr Parser::parse_for(const Token& start) {
  auto stmt = std::make_unique<Stmt>();
  stmt->kind = StmtKind::kFor;
  stmt->line = start.line;
  stmt->column = start.column;
  stmt->targets = parse_assign_names(&stmt->unpack, {"in"});
  if (!skip_name("in")) fail(current(), "expected 'in', got " + describe(current()));
  stmt->exprs.push_back(parse_tuple(false, {"recursive"}));
  stmt->exprs.push_back(skip_name("if") ? parse_expression() : nullptr);
  if (at_name("recursive")) fail(current(), "recursive for loops are not supported");
  stmt->bodies.push_back(parse_body({"endfor", "else"}, false));
  if (advance().text == "else") {
    stmt->bodies.push_back(parse_body({"endfor"}, true));
  } else {
    stmt->bodies.emplace_back();
  }
  return stmt;
}

StmtPtr Parser::parse_set(const Token& start) {
  auto stmt = std::make_unique<Stmt>();
  stmt->line = start.line;
  stmt->column = start.column;
  if (current().kind == TokenKind::kName && look().kind == TokenKind::kOperator && look().text == ".") {
    stmt->targets.push_back(advance().text);
    advance();
    stmt->attribute = expect_name().text;
  } else {
    stmt->targets = parse_assign_names(&stmt->unpack, {});
  }
  if (skip_op("=")) {
    stmt->kind = StmtKind::kSet;
    stmt->exprs.push_back(parse_tuple());
    return stmt;
  }
  if (stmt->unpack) fail(start, "a block set assigns one name");
  stmt->kind = StmtKind::kSetBlock;
  stmt->exprs.push_back(at_op("|") ? parse_filter(nullptr, false) : nullptr);
  stmt->bodies.push_back(parse_body({"endset"}, true));
  return stmt;
}

void Parser::parse_signature(Stmt& stmt) {
  expect_op("(");
  while (!at_op(")")) {
    if (!stmt.targets.empty()) expect_op(",");
    stmt.targets.push_back(expect_name().text);
    if (skip_op("=")) {
      stmt.defaults.push_back(parse_expression());
    } else if (!stmt.defaults.empty()) {
      fail(current(), "non-default argument follows default argument");
    }
  }
  expect_op(")");
}

StmtPtr Parser::parse_macro(const Token& start) {
  auto stmt = std::make_unique<Stmt>();
  stmt->kind = StmtKind::kMacro;
  stmt->line = start.line;
  stmt->column = start.column;
  stmt->name = expect_name().text;
  parse_signature(*stmt);
  stmt->bodies.push_back(parse_body({"endmacro"}, true));
  return stmt;
}

StmtPtr Parser::parse_call_block(const Token& start) {
  auto stmt = std::make_unique<Stmt>();
  stmt->kind = StmtKind::kCallBlock;
  stmt->line = start.line;
  stmt->column = start.column;
  if (at_op("(")) parse_signature(*stmt);
  ExprPtr call = parse_expression();
  if (call->kind != ExprKind::kCall) fail(start, "expected call");
  stmt->exprs.push_back(std::move(call));
  stmt->bodies.push_back(parse_body({"endcall"}, true));
  return stmt;
}

StmtPtr Parser::parse_filter_block(const Token& start) {
  auto stmt = std::make_unique<Stmt>();
  stmt->kind = StmtKind::kFilterBlock;
  stmt->line = start.line;
  stmt->column = start.column;
  stmt->exprs.push_back(parse_filter(nullptr, true));
  stmt->bodies.push_back(parse_body({"endfilter"}, true));
  return stmt;
}

StmtPtr Parser::parse_with(const Token& start) {
  auto stmt = std::make_unique<Stmt>();
  stmt->kind = StmtKind::kWith;
  stmt->line = start.line;
  stmt->column = start.column;
  while (current().kind != TokenKind::kBlockEnd) {
    if (!stmt->targets.empty()) expect_op(",");
    stmt->targets.push_back(expect_name().text);
    expect_op("=");
    stmt->exprs.push_back(parse_expression());
  }
  stmt->bodies.push_back(parse_body({"endwith"}, true));
  return stmt;
}

}  // namespace kestrel::chat
