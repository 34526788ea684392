// Philox4x32-10: the counter-based random number generator of Salmon et al., "Parallel
// Random Numbers: As Easy as 1, 2, 3" (SC'11), as in Random123 and cuRAND.
//
// A counter-based generator is a pure function of (counter, key): no state to carry from
// step to step, so a sampler on the CPU and one on the GPU draw the same number for the
// same (seed, position) whatever else is in the batch. Header-only and usable from CUDA
// device code (nvcc sees __host__ __device__).
//
// Output matches Random123's philox4x32 with 10 rounds bit for bit (tested against its
// known-answer vectors).
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace kestrel {

struct PhiloxCounter {
  uint32_t v[4];
};

struct PhiloxKey {
  uint32_t v[2];
};

namespace philox_detail {

// Multipliers and Weyl key increments from the paper.
inline constexpr uint32_t kM0 = 0xD2511F53u;
inline constexpr uint32_t kM1 = 0xCD9E8D57u;
inline constexpr uint32_t kW0 = 0x9E3779B9u;  // golden ratio
inline constexpr uint32_t kW1 = 0xBB67AE85u;  // sqrt(3) - 1

KS_HOST_DEVICE inline PhiloxCounter mix_round(PhiloxCounter c, PhiloxKey k) {
  const uint64_t p0 = static_cast<uint64_t>(kM0) * c.v[0];
  const uint64_t p1 = static_cast<uint64_t>(kM1) * c.v[2];
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  return PhiloxCounter{{hi1 ^ c.v[1] ^ k.v[0], lo1, hi0 ^ c.v[3] ^ k.v[1], lo0}};
}

}  // namespace philox_detail

// The 128 random bits for one (counter, key).
KS_HOST_DEVICE inline PhiloxCounter philox4x32_10(PhiloxCounter ctr, PhiloxKey key) {
  ctr = philox_detail::mix_round(ctr, key);
  for (int r = 1; r < 10; ++r) {
    key.v[0] += philox_detail::kW0;
    key.v[1] += philox_detail::kW1;
    ctr = philox_detail::mix_round(ctr, key);
  }
  return ctr;
}

// A uniform float in [0, 1) with 24 random bits (every value a multiple of 2^-24, so the
// float is exact and 1.0 is never returned).
// Layout: key = (seed low 32 bits, seed high 32 bits);
//         counter = (counter low, counter high, stream, 0); the first output word is used.
// The sampler calls it with counter = the token's position in its sequence and stream 0;
// other streams are free for other uses of the same seed.
KS_HOST_DEVICE inline float uniform01(uint64_t seed, uint64_t counter, uint32_t stream) {
  const PhiloxKey key{{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
  const PhiloxCounter ctr{
      {static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), stream, 0u}};
  const uint32_t bits = philox4x32_10(ctr, key).v[0] >> 8;
  return static_cast<float>(bits) * (1.0f / 16777216.0f);
}

}  // namespace kestrel
