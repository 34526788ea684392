// The CPU side of the fp8 KV cache contract (LayerKvCache in backend/backend.h): one head's
// row quantized on store and dequantized on read, through core/fp8's conversions (the ones
// the CUDA store is bit-exact to).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/fp8.h"

namespace kestrel::cpu {

// What one thread's stores saw for one (K or V, head): merged into LayerKvCache's amax and
// clamped when the op ends.
struct Fp8StoreCounts {
  float amax = 0.0f;
  int64_t clamped = 0;
};

// dst[i] = e4m3(x[i] / scale). The division is the contract's (exact for the power-of-two
// scales the runner sets). NaN neither raises amax nor counts as a clamp (it stores 0x7f).
inline void store_fp8_row(const float* x, int n, float scale, uint8_t* dst, Fp8StoreCounts& c) {
  for (int i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (a > c.amax) c.amax = a;
    const float y = x[i] / scale;
    if (std::fabs(y) > kE4M3Max) ++c.clamped;
    dst[i] = f32_to_e4m3(y);
  }
}

// The 256 values of one head's codes: e4m3 * scale, so a row is dequantized by lookups.
struct Fp8Table {
  float value[256];
  explicit Fp8Table(float scale) {
    for (int c = 0; c < 256; ++c) value[c] = e4m3_to_f32(static_cast<uint8_t>(c)) * scale;
  }
};

inline void load_fp8_row(const uint8_t* src, int n, const Fp8Table& table, float* out) {
  for (int i = 0; i < n; ++i) out[i] = table.value[src[i]];
}

}  // namespace kestrel::cpu
