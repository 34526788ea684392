// FP8 E4M3 ("FN") scalar conversions on the host, bit-exact to the CUDA conversion the KV
// cache's store uses (cvt.rn.satfinite.e4m3x2.f32: round to nearest even, saturate to
// +-448, NaN to 0x7f).
//
// Format: 1 sign, 4 exponent (bias 7), 3 mantissa bits. Normals 2^-6 .. 448 (1.75 x 2^8);
// subnormals m x 2^-9, m in 1..7; no infinities; S.1111.111 is NaN.
#pragma once

#include <cstdint>

namespace kestrel {

// Largest finite e4m3 value.
constexpr float kE4M3Max = 448.0f;

uint8_t f32_to_e4m3(float f);
float e4m3_to_f32(uint8_t v);

}  // namespace kestrel
