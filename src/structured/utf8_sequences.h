// Code-point ranges as UTF-8 byte-range sequences: [0x80, 0x7FF] becomes
// [C2-DF][80-BF], and so on. Every sequence matches only well-formed UTF-8 (no overlong
// forms, no surrogates), and together they match exactly the encodings of the range.
#pragma once

#include <cstdint>
#include <vector>

#include "structured/regex_ast.h"

namespace kestrel::structured {

struct ByteRange {
  uint8_t lo = 0, hi = 0;
};
using Utf8Sequence = std::vector<ByteRange>;  // 1 to 4 ranges, one per byte

// REQUIRES: lo <= hi <= kMaxCodePoint.
std::vector<Utf8Sequence> utf8_sequences(uint32_t lo, uint32_t hi);

}  // namespace kestrel::structured
