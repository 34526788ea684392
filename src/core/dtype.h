// Element types and the scalar conversions between them.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace kestrel {

// kF8E4M3: OCP FP8 E4M3 ("FN": no infinities, one NaN pattern per sign, largest finite 448),
// the KV cache's 8-bit storage (core/fp8.h converts).
enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kI64, kU8, kF8E4M3 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);
// Parses a safetensors dtype string ("F32", "F16", "BF16", "I32", "I64", "U8", "F8_E4M3").
// Throws kestrel::Error naming the string when it is not one of these.
DType parse_safetensors_dtype(std::string_view s);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts n elements of a float type (f32/f16/bf16) to f32.
void convert_to_f32(const void* src, DType src_type, float* dst, size_t n);
// Converts n f32 values to a float type (f32/f16/bf16).
void convert_from_f32(const float* src, void* dst, DType dst_type, size_t n);

}  // namespace kestrel
