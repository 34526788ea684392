// Splits template source into tokens exactly as jinja2's lexer does with Hugging Face's
// settings (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False):
//
// - "\r\n" and "\r" become "\n"; one trailing newline of the source is dropped;
// - `{%-`, `{{-`, `{#-` strip all whitespace before the tag, `-%}`, `-}}`, `-#}` after it;
// - trim_blocks: the first newline after `%}` or `#}` is dropped (not after `+%}`);
// - lstrip_blocks: spaces/tabs from the start of a line up to `{%` or `{#` are dropped
//   (not before `{%+`, never before `{{`);
// - `{% raw %}...{% endraw %}` is passed through as text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kestrel::chat {

enum class TokenKind {
  kData, kVariableBegin, kVariableEnd, kBlockBegin, kBlockEnd,
  kName, kString, kInteger, kFloat, kOperator, kEof,
};

struct Token {
  TokenKind kind;
  std::string text;  // data, name, operator, or the decoded string literal
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
  int column = 1;
};

// Throws TemplateError (with line and column) on malformed input.
std::vector<Token> tokenize(const std::string& source);

}  // namespace kestrel::chat
