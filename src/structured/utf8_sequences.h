// Code-point ranges as UTF-8 byte-range sequences: [0x80, 0x7FF] becomes
// [C2-DF][80-BF], and so on. Every sequence matches only well-formed UTF-8 (no overlong
// forms, no surrogates), and together they match exactly the encodings of the range.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "structured/regex_ast.h"

namespace kestrel::structured {

struct ByteRange {
  uint8_t lo = 0, hi = 0;
};
using Utf8Sequence = std::vector<ByteRange>;  // 1 to 4 ranges, one per byte

// REQUIRES: lo <= hi <= kMaxCodePoint.
std::vector<Utf8Sequence> utf8_sequences(uint32_t lo, uint32_t hi);

// The code point whose UTF-8 starts at text[pos] into `cp`; returns its length in bytes, or
// 0 where the bytes there are not a lead byte and its continuations or encode a surrogate
// or a value past U+10FFFF (the parsers' "invalid UTF-8"). Overlong forms are read as the
// code point they spell.
inline int decode_utf8(std::string_view text, size_t pos, uint32_t& cp) {
  const auto b = static_cast<unsigned char>(text[pos]);
  const int len = b < 0x80 ? 1 : b >= 0xF8 ? 0 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
  if (len == 0 || pos + len > text.size()) return 0;
  cp = len == 1 ? b : b & (0x7F >> len);
  for (int k = 1; k < len; ++k) {
    const auto c = static_cast<unsigned char>(text[pos + k]);
    if ((c & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (c & 0x3F);
  }
  return cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF) ? 0 : len;
}

}  // namespace kestrel::structured
