#include "server/pythonic_calls.h"

#include "server/held_call_parser.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <string>

namespace kestrel::server {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kStart = "<|python_start|>", kEnd = "<|python_end|>";

// A recursive-descent reader of the call list; every method returns false (or nullopt) at
// the first thing that is not the grammar, leaving the caller to treat the text as content.
class Reader {
 public:
  explicit Reader(std::string_view text) : s_(text) {}

  std::optional<std::vector<ToolCall>> calls() {
    std::vector<ToolCall> out;
    blanks();
    if (!eat('[')) return std::nullopt;
    for (;;) {
      blanks();
      if (eat(']')) break;
      if (!out.empty() && !eat(',')) return std::nullopt;
      blanks();
      if (!out.empty() && eat(']')) break;  // a trailing comma
      std::optional<ToolCall> call = this->call();
      if (!call) return std::nullopt;
      out.push_back(std::move(*call));
    }
    blanks();
    if (i_ != s_.size() || out.empty()) return std::nullopt;
    return out;
  }

 private:
  std::optional<ToolCall> call() {
    std::string name = identifier();
    while (!name.empty() && eat('.')) {  // module.function
      const std::string part = identifier();
      if (part.empty()) return std::nullopt;
      name += "." + part;
    }
    blanks();
    if (name.empty() || !eat('(')) return std::nullopt;
    ojson args = ojson::object();
    for (;;) {
      blanks();
      if (eat(')')) break;
      if (!args.empty() && !eat(',')) return std::nullopt;
      blanks();
      if (!args.empty() && eat(')')) break;
      const std::string key = identifier();
      blanks();
      if (key.empty() || !eat('=')) return std::nullopt;
      std::optional<ojson> v = value(0);
      if (!v || args.contains(key)) return std::nullopt;
      args[key] = std::move(*v);
    }
    return ToolCall{name, args.dump(-1, ' ', false, ojson::error_handler_t::replace)};
  }

  std::optional<ojson> value(int depth) {
    if (depth > 64) return std::nullopt;
    blanks();
    if (i_ >= s_.size()) return std::nullopt;
    const char c = s_[i_];
    if (c == '"' || c == '\'') return string();
    if (c == '[' || c == '(') return sequence(c == '[' ? ']' : ')', depth);
    if (c == '{') return dict(depth);
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    const std::string word = identifier();
    if (word == "True") return ojson(true);
    if (word == "False") return ojson(false);
    if (word == "None") return ojson(nullptr);
    return std::nullopt;
  }

  std::optional<ojson> sequence(char close, int depth) {
    ++i_;
    ojson out = ojson::array();
    for (;;) {
      blanks();
      if (eat(close)) return out;
      if (!out.empty() && !eat(',')) return std::nullopt;
      blanks();
      if (!out.empty() && eat(close)) return out;
      std::optional<ojson> v = value(depth + 1);
      if (!v) return std::nullopt;
      out.push_back(std::move(*v));
    }
  }

  std::optional<ojson> dict(int depth) {
    ++i_;
    ojson out = ojson::object();
    for (;;) {
      blanks();
      if (eat('}')) return out;
      if (!out.empty() && !eat(',')) return std::nullopt;
      blanks();
      if (!out.empty() && eat('}')) return out;
      std::optional<ojson> key = value(depth + 1);
      blanks();
      if (!key || !key->is_string() || !eat(':')) return std::nullopt;
      std::optional<ojson> v = value(depth + 1);
      if (!v) return std::nullopt;
      out[key->get<std::string>()] = std::move(*v);
    }
  }

  // A Python string literal: the escapes JSON has, plus \' and \xNN; no raw or byte prefixes.
  std::optional<ojson> string() {
    const char quote = s_[i_++];
    std::string out;
    while (i_ < s_.size()) {
      const char c = s_[i_++];
      if (c == quote) return ojson(out);
      if (c == '\n') return std::nullopt;  // a single-quoted literal ends on its line
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) return std::nullopt;
      const char e = s_[i_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': case '\'': case '"': out += e; break;
        case 'x': case 'u': {
          const size_t digits = e == 'x' ? 2 : 4;
          if (i_ + digits > s_.size()) return std::nullopt;
          unsigned code = 0;
          for (size_t k = 0; k < digits; ++k) {
            const char h = s_[i_++];
            code <<= 4;
            if (h >= '0' && h <= '9') code |= unsigned(h - '0');
            else if (h >= 'a' && h <= 'f') code |= unsigned(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F') code |= unsigned(h - 'A' + 10);
            else return std::nullopt;
          }
          append_utf8(code, out);
          break;
        }
        default: return std::nullopt;
      }
    }
    return std::nullopt;
  }

  std::optional<ojson> number() {
    const size_t start = i_;
    if (s_[i_] == '-') ++i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.' ||
                              ((s_[i_] == '+' || s_[i_] == '-') &&
                               (s_[i_ - 1] == 'e' || s_[i_ - 1] == 'E')))) {
      ++i_;
    }
    // Python's number syntax where it is JSON's (no 0x, no underscores, no trailing dot).
    ojson n = ojson::parse(s_.substr(start, i_ - start), nullptr, false);
    if (n.is_discarded() || !n.is_number()) return std::nullopt;
    return n;
  }

  static void append_utf8(unsigned code, std::string& out) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }

  std::string identifier() {
    const size_t start = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_')) {
      ++i_;
    }
    if (i_ > start && std::isdigit(static_cast<unsigned char>(s_[start]))) {
      i_ = start;
      return std::string();
    }
    return std::string(s_.substr(start, i_ - start));
  }

  void blanks() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r' || s_[i_] == '\n')) {
      ++i_;
    }
  }
  bool eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }

  std::string_view s_;
  size_t i_ = 0;
};

class PythonicParser final : public HeldCallParser {
 public:
  PythonicParser() : HeldCallParser('[', kStart) {}

 private:
  std::optional<std::vector<ToolCall>> parse(std::string_view text) const override {
    const size_t end = text.rfind(kEnd);  // Llama 4's closing tag, when decoding kept it
    if (end != std::string_view::npos) text = text.substr(0, end);
    return parse_pythonic_calls(text);
  }
};

}  // namespace

std::unique_ptr<ToolCallParser> make_pythonic_parser() { return std::make_unique<PythonicParser>(); }

std::optional<std::vector<ToolCall>> parse_pythonic_calls(std::string_view text) {
  return Reader(text).calls();
}

}  // namespace kestrel::server
