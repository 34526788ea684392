// Integers in [lo, hi] as a pattern over their decimal text (JSON schema minimum/maximum
// on integers): no leading zeros, no "-0", at most 15 digits like every generated integer.
#pragma once

#include <cstdint>

#include "structured/regex_ast.h"

namespace kestrel::structured {

constexpr int64_t kMaxGeneratedInteger = 999'999'999'999'999;  // 15 digits

// Matches exactly the decimal forms of the integers in [lo, hi] after clamping both to
// [-kMaxGeneratedInteger, kMaxGeneratedInteger]. Throws kestrel::Error when that leaves
// no integer.
RegexNode integer_range(int64_t lo, int64_t hi);

}  // namespace kestrel::structured
