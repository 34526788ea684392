// UTF-8 validation and lossy decoding. Expected values come from the Unicode Standard
// (Table 3-7 well-formed sequences; Table 3-8 "U+FFFD for maximal subparts", which Rust's
// from_utf8_lossy and therefore HF follow), worked out by hand.
#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

#include <string>

namespace kestrel::utf8 {
namespace {

const std::string R(kReplacement);

std::string lossy(std::string_view bytes) {
  std::string out;
  append_lossy(out, bytes);
  return out;
}

TEST(Utf8, FindInvalidAcceptsWellFormed) {
  EXPECT_EQ(find_invalid(""), std::string::npos);
  EXPECT_EQ(find_invalid("plain ascii text, long enough for the 8-byte skip"), std::string::npos);
  EXPECT_EQ(find_invalid("\xC2\x80 \xDF\xBF \xE0\xA0\x80 \xED\x9F\xBF \xEE\x80\x80 \xEF\xBF\xBF"),
            std::string::npos);
  EXPECT_EQ(find_invalid("\xF0\x90\x80\x80 \xF4\x8F\xBF\xBF \xF3\xBF\xBF\xBF"), std::string::npos);
  EXPECT_EQ(find_invalid(std::string("nul\0inside", 10)), std::string::npos);
}

TEST(Utf8, FindInvalidReportsOffsetOfFirstBadByte) {
  EXPECT_EQ(find_invalid("abc\xFF"), 3u);
  EXPECT_EQ(find_invalid("abcdefghij\x80"), 10u);           // lone continuation after 8-byte skip
  EXPECT_EQ(find_invalid("ab\xC0\xAF"), 2u);                // overlong '/'
  EXPECT_EQ(find_invalid("\xE0\x80\x80"), 0u);              // overlong 3-byte
  EXPECT_EQ(find_invalid("x\xED\xA0\x80"), 1u);             // encoded surrogate U+D800
  EXPECT_EQ(find_invalid("\xF4\x90\x80\x80"), 0u);          // above U+10FFFF
  EXPECT_EQ(find_invalid("ok\xE2\x82"), 2u);                // truncated at the end
  EXPECT_EQ(find_invalid("\xE2\x82\xAC\xE2\x28\xA1"), 3u);  // second sequence broken
}

TEST(Utf8, LossyReplacesMaximalSubparts) {
  // Unicode Table 3-8: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64.
  EXPECT_EQ(lossy("a\xF1\x80\x80\xE1\x80\xC2"
                  "b\x80"
                  "c\x80\xBF"
                  "d"),
            "a" + R + R + R + "b" + R + "c" + R + R + "d");
  EXPECT_EQ(lossy("\xED\xA0\x80"), R + R + R);  // ED cannot be followed by A0
  EXPECT_EQ(lossy("\xF0\x80\x80\x80"), R + R + R + R);
  EXPECT_EQ(lossy("\xC0\xAF"), R + R);
  EXPECT_EQ(lossy("\xE2\x82"), R);  // truncated sequence: one U+FFFD
  EXPECT_EQ(lossy("\xF0\x9F\x98"), R);
  EXPECT_EQ(lossy("\xE2\x82\xAC"), "\xE2\x82\xAC");  // complete: unchanged
  EXPECT_EQ(lossy("A\xF0\x9F\x98"
                  "B"),
            "A" + R + "B");
}

TEST(Utf8, TruncatedTailCountsOnlyCompletableBytes) {
  EXPECT_EQ(truncated_tail(""), 0u);
  EXPECT_EQ(truncated_tail("abc"), 0u);
  EXPECT_EQ(truncated_tail("abc\xE2\x82"), 2u);
  EXPECT_EQ(truncated_tail("abc\xE2"), 1u);
  EXPECT_EQ(truncated_tail("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(truncated_tail("\xF0\x9F\x98\x80"), 0u);
  EXPECT_EQ(truncated_tail("a\x80"), 0u);     // a lone continuation can never complete
  EXPECT_EQ(truncated_tail("\xED\xA0"), 0u);  // would be a surrogate
  EXPECT_EQ(truncated_tail("\xF4\x90"), 0u);  // would be above U+10FFFF
  EXPECT_EQ(truncated_tail("\xC2"), 1u);
  EXPECT_EQ(truncated_tail("\xFF\xC3"), 1u);
}

TEST(Utf8, DecodeAndAppendRoundTrip) {
  for (char32_t cp : {0x0u, 0x41u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xD7FFu, 0xE000u, 0xFFFDu,
                      0x10000u, 0x1F600u, 0x10FFFFu}) {
    std::string s;
    append(s, cp);
    EXPECT_EQ(find_invalid(s), std::string::npos) << std::hex << uint32_t(cp);
    size_t pos = 0;
    EXPECT_EQ(uint32_t(decode(s, pos)), uint32_t(cp));
    EXPECT_EQ(pos, s.size());
  }
}

}  // namespace
}  // namespace kestrel::utf8
