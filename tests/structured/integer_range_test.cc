// Integer ranges (JSON schema minimum/maximum on integers): the DFA accepts the decimal
// text of exactly the integers in range, checked by plain arithmetic over a window, and
// never a non-canonical form.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "structured/byte_dfa.h"
#include "structured/integer_range.h"
#include "structured_test_util.h"

namespace kestrel::structured {
namespace {

bool accepts(const ByteDfa& dfa, const std::string& s) { return testing::dfa_accepts(dfa, s); }

TEST(IntegerRange, AcceptsExactlyTheRange) {
  const std::vector<std::pair<int64_t, int64_t>> ranges = {
      {0, 0},      {0, 9},       {5, 5},      {1, 100},    {7, 1234},   {10, 99},   {19, 1001},
      {-1, 1},     {-15, -3},    {-2000, 37}, {-999, -100}, {123, 129}, {0, 2000},  {-5, 0},
      {990, 1010}, {100, 100},   {-1000, -1}, {58, 1999},
  };
  for (const auto& [lo, hi] : ranges) {
    SCOPED_TRACE(::testing::Message() << "[" << lo << ", " << hi << "]");
    const ByteDfa dfa = ByteDfa::build(integer_range(lo, hi));
    for (int64_t x = -2100; x <= 2100; ++x) {
      ASSERT_EQ(accepts(dfa, std::to_string(x)), x >= lo && x <= hi) << x;
    }
    for (const char* bad : {"-0", "00", "01", "-01", "", "-", "+1", "1.0"}) EXPECT_FALSE(accepts(dfa, bad)) << bad;
  }
}

TEST(IntegerRange, OpenEndsStopAtFifteenDigits) {
  const ByteDfa dfa = ByteDfa::build(integer_range(-5, INT64_MAX));
  EXPECT_TRUE(accepts(dfa, "999999999999999"));
  EXPECT_FALSE(accepts(dfa, "1000000000000000"));
  EXPECT_TRUE(accepts(dfa, "123456789012345"));
  EXPECT_FALSE(accepts(dfa, "-6"));
  const ByteDfa neg = ByteDfa::build(integer_range(INT64_MIN, -10));
  EXPECT_TRUE(accepts(neg, "-999999999999999"));
  EXPECT_FALSE(accepts(neg, "-9"));
  EXPECT_THROW(integer_range(5, 4), Error);
}

}  // namespace
}  // namespace kestrel::structured
