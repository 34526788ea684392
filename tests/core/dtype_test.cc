#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"

namespace kestrel {
namespace {

TEST(DType, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 lies exactly between two bf16 values (1 and 1 + 2^-7): ties go to even (1).
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // Just above the tie rounds up.
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_EQ(bf16_to_f32(0x3f81), 1.0f + std::ldexp(1.0f, -7));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(DType, F16KnownValues) {
  // Values and bit patterns from IEEE 754 binary16.
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);  // overflow to infinity
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // every finite positive half round-trips
    ASSERT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h);
  }
}

TEST(DType, ParseRejectsUnknown) {
  EXPECT_EQ(parse_safetensors_dtype("BF16"), DType::kBF16);
  EXPECT_EQ(parse_safetensors_dtype("F8_E4M3"), DType::kF8E4M3);
  try {
    parse_safetensors_dtype("F8_E5M2");  // the other fp8 format: no use for it yet
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("F8_E5M2"), std::string::npos);
  }
}

}  // namespace
}  // namespace kestrel
