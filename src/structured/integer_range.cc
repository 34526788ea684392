#include "structured/integer_range.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace kestrel::structured {
namespace {

RegexNode digits(char lo, char hi) { return class_of({{uint32_t(lo), uint32_t(hi)}}); }

// Digit strings of one length n from a to b (a <= b, both n digits; leading zeros allowed
// here, the caller chooses the lengths).
RegexNode same_length(const std::string& a, const std::string& b) {
  const size_t n = a.size();
  if (n == 1) return digits(a[0], b[0]);
  const std::string a_rest = a.substr(1), b_rest = b.substr(1);
  if (a[0] == b[0]) return concat({digits(a[0], a[0]), same_length(a_rest, b_rest)});
  if (a_rest == std::string(n - 1, '0') && b_rest == std::string(n - 1, '9')) {
    return concat({digits(a[0], b[0]), repeat(digits('0', '9'), int(n - 1), int(n - 1))});
  }
  std::vector<RegexNode> options;
  options.push_back(concat({digits(a[0], a[0]), same_length(a_rest, std::string(n - 1, '9'))}));
  if (a[0] + 1 <= b[0] - 1) {
    options.push_back(concat({digits(char(a[0] + 1), char(b[0] - 1)),
                              repeat(digits('0', '9'), int(n - 1), int(n - 1))}));
  }
  options.push_back(concat({digits(b[0], b[0]), same_length(std::string(n - 1, '0'), b_rest)}));
  return alt(std::move(options));
}

// Non-negative integers in [lo, hi] (0 <= lo <= hi), without leading zeros.
RegexNode non_negative(int64_t lo, int64_t hi) {
  std::vector<RegexNode> options;
  int64_t first = 0, last = 9;  // the integers of the current digit count
  for (int n = 1; n <= 15 && first <= hi; ++n) {
    const int64_t a = std::max(lo, first), b = std::min(hi, last);
    if (a <= b) options.push_back(same_length(std::to_string(a), std::to_string(b)));
    first = last + 1;
    last = last * 10 + 9;
  }
  return alt(std::move(options));
}

}  // namespace

RegexNode integer_range(int64_t lo, int64_t hi) {
  lo = std::max(lo, -kMaxGeneratedInteger);
  hi = std::min(hi, kMaxGeneratedInteger);
  KS_CHECK(lo <= hi, "no integer of at most 15 digits lies in [{}, {}]", lo, hi);
  std::vector<RegexNode> options;
  if (lo < 0) {  // -1 .. lo, written as "-" and the magnitude
    options.push_back(concat({literal("-"), non_negative(std::max<int64_t>(1, hi < 0 ? -hi : 1), -lo)}));
  }
  if (hi >= 0) options.push_back(non_negative(std::max<int64_t>(lo, 0), hi));
  return alt(std::move(options));
}

}  // namespace kestrel::structured
