#include "chat/lexer.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <string_view>
#include <tuple>

#include "chat/template_error.h"
#include "chat/utf8.h"

namespace kestrel::chat {

namespace {

std::string normalize_newlines(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (c & 0x80); }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t tag = find_tag(pos);
      if (tag == std::string::npos) {
        emit_data(src_.substr(pos), pos);
        break;
      }
      char kind = src_[tag + 1];
      char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+') ? src_[tag + 2] : 0;
      size_t raw_body = kind == '%' ? match_raw_begin(tag) : std::string::npos;
      emit_data(strip_before_tag(src_.substr(pos, tag - pos), sign, kind != '{', line_starting), pos);
      if (raw_body != std::string::npos) {
        pos = lex_raw(raw_body, src_[raw_body - 1] == '\n');
      } else if (kind == '#') {
        pos = skip_comment(tag, tag + 2 + (sign ? 1 : 0));
      } else {
        pos = lex_tag(tag, tag + 2 + (sign ? 1 : 0), kind == '%');
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    tokens_.push_back(make(TokenKind::kEof, "", src_.size()));
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(size_t offset, const std::string& message) const {
    auto [line, column] = location(offset);
    throw TemplateError(message, line, column, false);
  }

  std::pair<int, int> location(size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset) - 1;
    return {static_cast<int>(it - line_starts_.begin()) + 1, static_cast<int>(offset - *it) + 1};
  }

  Token make(TokenKind kind, std::string text, size_t offset) const {
    Token t{kind, std::move(text)};
    std::tie(t.line, t.column) = location(offset);
    return t;
  }

  void emit_data(std::string text, size_t offset) {
    if (!text.empty()) tokens_.push_back(make(TokenKind::kData, std::move(text), offset));
  }

  bool starts_with(size_t pos, std::string_view s) const { return src_.compare(pos, s.size(), s) == 0; }

  size_t skip_spaces(size_t pos) const {
    while (pos < src_.size()) {
      size_t next = pos;
      if (!py_is_space(utf8_next(src_, next))) break;
      pos = next;
    }
    return pos;
  }

  size_t find_tag(size_t pos) const {
    for (size_t p = src_.find('{', pos); p != std::string::npos; p = src_.find('{', p + 1)) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) return p;
    }
    return std::string::npos;
  }

  // The data before a tag, after `-` stripping or lstrip_blocks.
  std::string strip_before_tag(std::string text, char sign, bool is_block_or_comment, bool line_starting) const {
    if (sign == '-') return py_strip(text, nullptr, false, true);
    if (sign == '+' || !is_block_or_comment) return text;
    size_t line_pos = text.rfind('\n');
    line_pos = line_pos == std::string::npos ? 0 : line_pos + 1;
    if (line_pos == 0 && !line_starting) return text;
    std::string tail = text.substr(line_pos);
    if (!tail.empty() && py_strip(tail, nullptr, true, false).empty()) text.resize(line_pos);
    return text;
  }

  // Matches `{%[-+]?\s*raw\s*(-%}\s*|%})` at `tag`; returns the offset after it or npos.
  size_t match_raw_begin(size_t tag) const {
    size_t p = tag + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    p = skip_spaces(p);
    if (!starts_with(p, "raw")) return std::string::npos;
    p = skip_spaces(p + 3);
    if (starts_with(p, "-%}")) return skip_spaces(p + 3);
    if (starts_with(p, "%}")) return p + 2;
    return std::string::npos;
  }

  // Length of a closing `+%}`, `-%}\s*` or `%}\n?` (block) at `p`, or 0.
  size_t match_block_end(size_t p, char close_char) const {
    std::string end = std::string(1, close_char) + "}";
    if (starts_with(p, "+" + end)) return 3;
    if (starts_with(p, "-" + end)) return skip_spaces(p + 3) - p;
    if (starts_with(p, end)) return p + 2 < src_.size() && src_[p + 2] == '\n' ? 3 : 2;
    return 0;
  }

  size_t lex_raw(size_t body, bool line_starting) {
    if (body >= src_.size()) return body;  // as for comments: nothing left to be unterminated
    for (size_t p = src_.find("{%", body); p != std::string::npos; p = src_.find("{%", p + 1)) {
      size_t q = p + 2;
      char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : 0;
      if (sign) ++q;
      q = skip_spaces(q);
      if (!starts_with(q, "endraw")) continue;
      q = skip_spaces(q + 6);
      size_t end_len = match_block_end(q, '%');
      if (end_len == 0) continue;
      emit_data(strip_before_tag(src_.substr(body, p - body), sign, true, line_starting), body);
      return q + end_len;
    }
    fail(body, "Missing end of raw directive");
  }

  size_t skip_comment(size_t tag, size_t p) {
    if (p >= src_.size()) return p;  // jinja2 silently drops a `{#` that ends the template
    for (; p < src_.size(); ++p) {
      if (size_t len = match_block_end(p, '#')) return p + len;
    }
    fail(tag, "Missing end of comment tag");
  }

  size_t lex_tag(size_t tag, size_t p, bool is_block) {
    tokens_.push_back(make(is_block ? TokenKind::kBlockBegin : TokenKind::kVariableBegin, "", tag));
    std::vector<char> balance;
    while (true) {
      if (p >= src_.size()) fail(tag, "Unexpected end of template: the tag opened here is never closed");
      if (balance.empty()) {
        size_t end_len = 0;
        if (is_block) {
          end_len = match_block_end(p, '%');
        } else if (starts_with(p, "-}}")) {
          end_len = skip_spaces(p + 3) - p;
        } else if (starts_with(p, "}}")) {
          end_len = 2;
        }
        if (end_len > 0) {
          tokens_.push_back(make(is_block ? TokenKind::kBlockEnd : TokenKind::kVariableEnd, "", p));
          return p + end_len;
        }
      }
      size_t next = skip_spaces(p);
      if (next != p) {
        p = next;
        continue;
      }
      p = lex_expression_token(p, balance);
    }
  }

  // Digits with single underscores between them: \d+(_\d+)*. Returns the end or `p`.
  size_t match_digits(size_t p) const {
    size_t q = p;
    while (q < src_.size() && is_digit(src_[q])) {
      while (q < src_.size() && is_digit(src_[q])) ++q;
      if (q + 1 < src_.size() && src_[q] == '_' && is_digit(src_[q + 1])) ++q;
    }
    return q;
  }

  size_t match_float(size_t p) const {
    if (p > 0 && src_[p - 1] == '.') return p;
    size_t q = match_digits(p);
    if (q == p) return p;
    size_t fraction_end = q;
    if (q < src_.size() && src_[q] == '.') {
      size_t f = match_digits(q + 1);
      if (f > q + 1) fraction_end = f;
    }
    size_t e = fraction_end;
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t s = e + 1;
      if (s < src_.size() && (src_[s] == '+' || src_[s] == '-')) ++s;
      size_t x = match_digits(s);
      if (x > s) return x;
    }
    return fraction_end > q ? fraction_end : p;
  }

  size_t match_integer(size_t p, int* base) const {
    auto run = [&](size_t q, auto ok) {  // (_?digit)+
      size_t end = q;
      while (true) {
        size_t r = end;
        if (r < src_.size() && src_[r] == '_') ++r;
        if (r < src_.size() && ok(src_[r])) end = r + 1;
        else return end;
      }
    };
    if (src_[p] == '0' && p + 1 < src_.size()) {
      char x = static_cast<char>(std::tolower(static_cast<unsigned char>(src_[p + 1])));
      auto try_prefix = [&](char prefix, int b, auto ok) -> size_t {
        if (x != prefix) return 0;
        size_t end = run(p + 2, ok);
        if (end == p + 2) return 0;
        *base = b;
        return end;
      };
      if (size_t e = try_prefix('b', 2, [](char c) { return c == '0' || c == '1'; })) return e;
      if (size_t e = try_prefix('o', 8, [](char c) { return c >= '0' && c <= '7'; })) return e;
      if (size_t e = try_prefix('x', 16, [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; })) return e;
    }
    *base = 10;
    if (src_[p] >= '1' && src_[p] <= '9') return run(p + 1, is_digit);
    if (src_[p] == '0') return run(p + 1, [](char c) { return c == '0'; });
    return p;
  }

  size_t lex_expression_token(size_t p, std::vector<char>& balance) {
    char c = src_[p];
    if (size_t end = match_float(p); end > p) {
      std::string text;
      for (size_t i = p; i < end; ++i) {
        if (src_[i] != '_') text += src_[i];
      }
      Token t = make(TokenKind::kFloat, text, p);
      t.float_value = std::strtod(text.c_str(), nullptr);
      tokens_.push_back(std::move(t));
      return end;
    }
    int base = 10;
    if (size_t end = match_integer(p, &base); end > p) {
      std::string digits;
      for (size_t i = p + (base == 10 ? 0 : 2); i < end; ++i) {
        if (src_[i] != '_') digits += src_[i];
      }
      errno = 0;
      Token t = make(TokenKind::kInteger, src_.substr(p, end - p), p);
      t.int_value = std::strtoll(digits.c_str(), nullptr, base);
      if (errno == ERANGE) fail(p, "integer literal too large (only 64-bit integers are supported)");
      tokens_.push_back(std::move(t));
      return end;
    }
    if (is_name_start(c)) {
      size_t end = p;
      while (end < src_.size() && is_name_char(src_[end])) ++end;
      tokens_.push_back(make(TokenKind::kName, src_.substr(p, end - p), p));
      return end;
    }
    if (c == '\'' || c == '"') return lex_string(p);
    return lex_operator(p, balance);
  }

  size_t lex_string(size_t p) {
    char quote = src_[p];
    size_t q = p + 1;
    while (q < src_.size() && src_[q] != quote) q += src_[q] == '\\' ? 2 : 1;
    if (q >= src_.size()) fail(p, std::string("unexpected char '") + quote + "'");
    tokens_.push_back(make(TokenKind::kString, decode_string(p + 1, q), p));
    return q + 1;
  }

  // Python's "unicode-escape" decoding of a string literal body.
  std::string decode_string(size_t begin, size_t end) const {
    std::string out;
    auto hex = [&](size_t at, int count) -> char32_t {
      if (at + count > end) fail(at, "truncated escape in string literal");
      char32_t v = 0;
      for (int i = 0; i < count; ++i) {
        char h = src_[at + i];
        if (!std::isxdigit(static_cast<unsigned char>(h))) fail(at, "truncated escape in string literal");
        v = v * 16 + (is_digit(h) ? h - '0' : std::tolower(h) - 'a' + 10);
      }
      return v;
    };
    for (size_t i = begin; i < end; ++i) {
      if (src_[i] != '\\') {
        out += src_[i];
        continue;
      }
      char e = src_[++i];
      switch (e) {
        case '\n': break;  // line continuation
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x': utf8_append(out, hex(i + 1, 2)); i += 2; break;
        case 'u': utf8_append(out, hex(i + 1, 4)); i += 4; break;
        case 'U': {
          char32_t cp = hex(i + 1, 8);
          if (cp > 0x10FFFF) fail(i, "illegal Unicode character in string literal");
          utf8_append(out, cp);
          i += 8;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t v = 0;
            int n = 0;
            for (; n < 3 && i < end && src_[i] >= '0' && src_[i] <= '7'; ++n, ++i) v = v * 8 + (src_[i] - '0');
            --i;
            utf8_append(out, v);
          } else if (e & 0x80) {
            // jinja2 escapes non-ASCII text as \xNN/\uNNNN first, so "\é" decodes to "\xe9".
            size_t pos = i;
            char32_t cp = utf8_next(src_, pos);
            out += cp < 0x100 ? fmt_hex("\\x", cp, 2) : cp < 0x10000 ? fmt_hex("\\u", cp, 4) : fmt_hex("\\U", cp, 8);
            i = pos - 1;
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    return out;
  }

  static std::string fmt_hex(const char* prefix, char32_t cp, int width) {
    static const char* kDigits = "0123456789abcdef";
    std::string out = prefix;
    for (int shift = (width - 1) * 4; shift >= 0; shift -= 4) out += kDigits[(cp >> shift) & 0xF];
    return out;
  }

  size_t lex_operator(size_t p, std::vector<char>& balance) {
    static const char* kTwoChar[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwoChar) {
      if (starts_with(p, op)) {
        tokens_.push_back(make(TokenKind::kOperator, op, p));
        return p + 2;
      }
    }
    char c = src_[p];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      fail(p, std::string("unexpected char '") + c + "'");
    }
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) fail(p, std::string("unexpected '") + c + "'");
      if (balance.back() != c) fail(p, std::string("unexpected '") + c + "', expected '" + balance.back() + "'");
      balance.pop_back();
    }
    tokens_.push_back(make(TokenKind::kOperator, std::string(1, c), p));
    return p + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) { return Lexer(normalize_newlines(source)).run(); }

}  // namespace kestrel::chat
