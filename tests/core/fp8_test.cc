// core/fp8 against an oracle built here from the format's definition (OCP FP8 E4M3, "FN"):
// decoding by the formula, encoding by searching all finite codes for the nearest value
// in double precision, ties to the even code, saturation to +-448, NaN to 0x7f.
#include "core/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace kestrel {
namespace {

bool is_nan_code(int c) { return (c & 0x7f) == 0x7f; }

// Sign bit, 4-bit exponent with bias 7, 3-bit mantissa; exponent 0 is subnormal
// (0.m x 2^-6 = m x 2^-9); S.1111.111 is NaN, so 448 = 1.75 x 2^8 is the largest finite.
double oracle_decode(int c) {
  if (is_nan_code(c)) return std::numeric_limits<double>::quiet_NaN();
  const int e = (c >> 3) & 0xf;
  const int m = c & 7;
  const double mag = e == 0 ? m / 8.0 * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return (c & 0x80) ? -mag : mag;
}

// The nearest finite code to x by magnitude, ties to the even code; saturates at 448.
uint8_t oracle_encode(double x) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(x);
  if (a >= 448.0) return sign | 0x7e;
  int best = 0;
  double best_err = a;
  for (int c = 1; c <= 0x7e; ++c) {
    const double err = std::fabs(oracle_decode(c) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return sign | static_cast<uint8_t>(best);
}

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

void expect_encodes(float f) {
  ASSERT_EQ(f32_to_e4m3(f), oracle_encode(f)) << "x = " << f << " (" << std::hexfloat << f << ")";
}

TEST(Fp8, DecodesEveryCode) {
  for (int c = 0; c < 256; ++c) {
    const double want = oracle_decode(c);
    const float got = e4m3_to_f32(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << "code " << c;
      EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << "code " << c;
    }
  }
  // Anchors from the format's table, not from the formula above.
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x08), 0x1p-6f);
  EXPECT_EQ(e4m3_to_f32(0x01), 0x1p-9f);
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_f32(0xc0), -2.0f);
}

TEST(Fp8, EveryFiniteCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    if (is_nan_code(c)) continue;
    EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(static_cast<uint8_t>(c))), c) << "code " << c;
  }
}

TEST(Fp8, EncodesEveryBf16Pattern) {
  for (uint32_t h = 0; h < 0x10000; ++h) expect_encodes(from_bits(h << 16));
}

TEST(Fp8, EncodesRandomFloats) {
  std::mt19937 rng(16);
  std::uniform_int_distribution<uint32_t> bits;
  std::uniform_real_distribution<float> near_range(-500.0f, 500.0f);
  std::uniform_real_distribution<float> tiny(-0.02f, 0.02f);
  for (int i = 0; i < 200000; ++i) {
    expect_encodes(from_bits(bits(rng)));
    expect_encodes(near_range(rng));
    expect_encodes(tiny(rng));
  }
}

TEST(Fp8, MidpointsTieToEven) {
  // Every midpoint between neighbouring finite magnitudes is exact in f32 (5 significant
  // bits); it and its two f32 neighbours must go to the even code, down and up.
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = e4m3_to_f32(static_cast<uint8_t>(c));
    const float hi = e4m3_to_f32(static_cast<uint8_t>(c + 1));
    const float mid = 0.5f * (lo + hi);
    ASSERT_EQ(static_cast<double>(mid), 0.5 * (double(lo) + double(hi)));
    const int even = (c & 1) == 0 ? c : c + 1;
    EXPECT_EQ(f32_to_e4m3(mid), even) << "midpoint " << mid;
    EXPECT_EQ(f32_to_e4m3(-mid), 0x80 | even) << "midpoint " << -mid;
    EXPECT_EQ(f32_to_e4m3(std::nextafter(mid, 0.0f)), c) << "below " << mid;
    EXPECT_EQ(f32_to_e4m3(std::nextafter(mid, 1e9f)), c + 1) << "above " << mid;
    expect_encodes(mid);
  }
}

TEST(Fp8, EdgeCases) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(f32_to_e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(464.0f), 0x7e);  // would tie to 480, which is NaN's pattern
  EXPECT_EQ(f32_to_e4m3(480.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(1e30f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(-464.0f), 0xfe);
  EXPECT_EQ(f32_to_e4m3(inf), 0x7e);
  EXPECT_EQ(f32_to_e4m3(-inf), 0xfe);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(f32_to_e4m3(from_bits(0x7f800001u)), 0x7f);  // signalling NaN
  EXPECT_EQ(f32_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_e4m3(0x1p-10f), 0x00);   // half the smallest subnormal: tie to 0
  EXPECT_EQ(f32_to_e4m3(-0x1p-10f), 0x80);
  EXPECT_EQ(f32_to_e4m3(0x1.000002p-10f), 0x01);
  EXPECT_EQ(f32_to_e4m3(0x1p-149f), 0x00);  // smallest f32 subnormal
  EXPECT_EQ(f32_to_e4m3(0x1.cp-7f), 0x07);  // largest e4m3 subnormal, 7 x 2^-9
  EXPECT_EQ(f32_to_e4m3(0x1.ep-7f), 0x08);  // its midpoint to 2^-6 ties to the even normal
  EXPECT_EQ(f32_to_e4m3(0x1.ep-7f - 0x1p-30f), 0x07);
  for (float f : {448.0f, 464.0f, 480.0f, 0x1p-10f, 0x1.ep-7f, 0x1p-6f, 1.0f, 1.0625f, 1.1875f,
                  240.0f, 248.0f, 432.0f, 440.0f, 447.99f}) {
    expect_encodes(f);
    expect_encodes(-f);
  }
}

}  // namespace
}  // namespace kestrel
