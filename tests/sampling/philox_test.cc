// Oracle: the Philox4x32-10 known-answer vectors of Random123 (kat_vectors), written by its
// authors D. E. Shaw Research.
#include "core/philox.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kestrel {
namespace {

void expect_kat(PhiloxCounter ctr, PhiloxKey key, PhiloxCounter expected) {
  const PhiloxCounter out = philox4x32_10(ctr, key);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(out.v[i], expected.v[i]) << "word " << i << std::hex << " got 0x" << out.v[i];
  }
}

TEST(Philox, KnownAnswerZero) {
  expect_kat({{0, 0, 0, 0}}, {{0, 0}}, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}});
}

TEST(Philox, KnownAnswerAllOnes) {
  const uint32_t f = 0xffffffffu;
  expect_kat({{f, f, f, f}}, {{f, f}}, {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}});
}

TEST(Philox, KnownAnswerPiDigits) {
  expect_kat({{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, {{0xa4093822, 0x299f31d0}},
             {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}});
}

TEST(Philox, Uniform01UsesTheTop24BitsOfWordZero) {
  // seed 0, counter 0, stream 0 is the all-zero KAT input: word 0 = 0x6627e8d5.
  EXPECT_EQ(uniform01(0, 0, 0), static_cast<float>(0x6627e8) / 16777216.0f);
}

TEST(Philox, Uniform01MapsSeedCounterAndStreamToKeyAndCounterWords) {
  // The pi-digits KAT with counter words 3 = 0 is not a published vector, so check the
  // mapping itself: seed -> key (low, high), counter -> words 0 and 1, stream -> word 2.
  const uint64_t seed = 0x299f31d0a4093822ull;
  const uint64_t counter = 0x85a308d3243f6a88ull;
  const PhiloxCounter out =
      philox4x32_10({{0x243f6a88, 0x85a308d3, 0x13198a2e, 0}}, {{0xa4093822, 0x299f31d0}});
  EXPECT_EQ(uniform01(seed, counter, 0x13198a2e), static_cast<float>(out.v[0] >> 8) / 16777216.0f);
}

TEST(Philox, Uniform01IsInRangeAndUniform) {
  // 2^16 draws over consecutive counters: range [0, 1), mean 1/2 and variance 1/12 within
  // a few standard errors, and the 16 equal-width bins within 5 sigma of 4096 each.
  constexpr int kN = 1 << 16;
  double sum = 0, sum_sq = 0;
  int bins[16] = {};
  for (int i = 0; i < kN; ++i) {
    const float u = uniform01(42, static_cast<uint64_t>(i), 0);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
    sum_sq += static_cast<double>(u) * u;
    ++bins[static_cast<int>(u * 16)];
  }
  const double mean = sum / kN;
  EXPECT_NEAR(mean, 0.5, 5 * std::sqrt(1.0 / 12 / kN));
  EXPECT_NEAR(sum_sq / kN - mean * mean, 1.0 / 12, 0.003);
  for (int b : bins) EXPECT_NEAR(b, kN / 16, 5 * std::sqrt(kN / 16.0));
}

TEST(Philox, StreamsAndSeedsAreIndependentDraws) {
  int same_stream = 0, same_seed = 0;
  for (uint64_t c = 0; c < 1000; ++c) {
    same_stream += uniform01(7, c, 0) == uniform01(7, c, 1);
    same_seed += uniform01(7, c, 0) == uniform01(8, c, 0);
  }
  // Two independent 24-bit draws collide with probability 2^-24.
  EXPECT_EQ(same_stream, 0);
  EXPECT_EQ(same_seed, 0);
}

}  // namespace
}  // namespace kestrel
