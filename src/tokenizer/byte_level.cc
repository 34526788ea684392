#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace kestrel::byte_level {
namespace {

struct Tables {
  std::array<std::string, 256> chars;  // byte -> UTF-8 of its character
  std::array<int16_t, 324> bytes;      // code point (< 324) -> byte, or -1

  Tables() {
    bytes.fill(-1);
    char32_t next_extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const char32_t cp = printable ? char32_t(b) : next_extra++;
      utf8::append(chars[b], cp);
      bytes[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

std::string_view char_of(uint8_t b) { return tables().chars[b]; }

int byte_of(char32_t cp) { return cp < tables().bytes.size() ? tables().bytes[cp] : -1; }

std::string encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out.append(char_of(static_cast<uint8_t>(c)));
  return out;
}

std::string decode(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    const int b = byte_of(utf8::decode(token, pos));
    if (b < 0) return std::string(token);
    out.push_back(static_cast<char>(b));
  }
  return out;
}

}  // namespace kestrel::byte_level
