#include "core/fp8.h"

#include <cmath>
#include <cstring>

namespace kestrel {

uint8_t f32_to_e4m3(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7f;
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const float a = std::fabs(f);
  // Everything from 448 up (the next step, 480, would be the NaN pattern) saturates.
  if (a >= kE4M3Max) return sign | 0x7e;
  if (a < 0x1p-6f) {  // subnormal range, quantum 2^-9; m == 8 is the smallest normal (code 8)
    const auto m = static_cast<uint8_t>(std::nearbyint(a * 0x1p9f));
    return sign | m;
  }
  int e;
  std::frexp(a, &e);  // a = x 2^e, x in [0.5, 1): a's exponent is e - 1
  int exp = e - 1;
  // 8..16 quanta of 2^(exp - 3); exact scaling, round to nearest even.
  auto q = static_cast<int>(std::nearbyint(std::ldexp(a, 3 - exp)));
  if (q == 16) {
    q = 8;
    ++exp;
  }
  return sign | static_cast<uint8_t>(((exp + 7) << 3) | (q - 8));
}

float e4m3_to_f32(uint8_t v) {
  const int exp = (v >> 3) & 0xf;
  const int mant = v & 7;
  float a;
  if (exp == 15 && mant == 7) {
    a = NAN;
  } else if (exp == 0) {
    a = std::ldexp(static_cast<float>(mant), -9);
  } else {
    a = std::ldexp(static_cast<float>(8 + mant), exp - 10);
  }
  return (v & 0x80) ? -a : a;
}

}  // namespace kestrel
