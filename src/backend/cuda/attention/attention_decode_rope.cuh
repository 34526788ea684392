// Device helpers of the fused decode kernel (attention_decode.cu): qk_norm_rope_store's RMSNorm
// and RoPE applied in registers to a head held as 8 dims per lane by the D/8 adjacent lanes
// of a key slot. RopeRow also serves the RoPE/store kernel (rope_store.cu).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"

namespace kestrel::kernels::detail {

// What the fused path needs of the rope besides qkv, for one token and this lane's 8 dims:
// cos, sin and the norm weights (inputs and weights, loaded before the wait), the KV slot.
// A token's position as an index into the cos/sin table: clamped to [0, max_pos).
__device__ __forceinline__ int rope_position(int pos, int max_pos) {
  return pos < 0 ? 0 : (pos >= max_pos ? max_pos - 1 : pos);
}

struct RopeRow {
  float cos[8], sin[8], q_norm[8], k_norm[8];
  int kv_slot;

  template <int kLanes>
  __device__ __forceinline__ void load(const QkNormRopeArgs& rope, int token, int sub) {
    constexpr int D = kLanes * 8;
    const int pos = rope_position(rope.positions[token], rope.max_pos);
    const float* cs = rope.cos_sin + int64_t(pos) * D;
    const int pair = (sub < kLanes / 2 ? sub : sub - kLanes / 2) * 8;  // this lane's first pair
    *reinterpret_cast<float4*>(cos) = *reinterpret_cast<const float4*>(cs + pair);
    *reinterpret_cast<float4*>(cos + 4) = *reinterpret_cast<const float4*>(cs + pair + 4);
    *reinterpret_cast<float4*>(sin) = *reinterpret_cast<const float4*>(cs + D / 2 + pair);
    *reinterpret_cast<float4*>(sin + 4) = *reinterpret_cast<const float4*>(cs + D / 2 + pair + 4);
    if (rope.q_norm != nullptr) unpack8(*reinterpret_cast<const uint4*>(rope.q_norm + sub * 8), q_norm);
    if (rope.k_norm != nullptr) unpack8(*reinterpret_cast<const uint4*>(rope.k_norm + sub * 8), k_norm);
    kv_slot = rope.slot_mapping[token];
  }
};

// qk_norm_rope_store's maths on one head held as 8 dims per lane ([8 sub, 8 sub + 8)) by the
// kLanes adjacent lanes of a key slot: the RMSNorm (when `norm`) sums over those lanes, and
// RoPE pairs dim i with i + D/2, which lane sub ^ (kLanes / 2) holds. Every lane of the warp
// must call it (shuffles). Same roundings as rope_store.cu; the result is bf16.
template <int kLanes>
__device__ __forceinline__ void norm_rope8(float (&x)[8], bool norm, const float (&w)[8],
                                           float eps, const RopeRow& rr, int sub) {
  constexpr int D = kLanes * 8;
  if (norm) {
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) ss += x[e] * x[e];
#pragma unroll
    for (int o = kLanes / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float inv = rsqrtf(ss / D + eps);
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = round_bf16(round_bf16(x[e] * inv) * w[e]);
  }
  const bool first_half = sub < kLanes / 2;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const float other = __shfl_xor_sync(0xffffffffu, x[e], kLanes / 2);
    const float cx = round_bf16(x[e] * round_bf16(rr.cos[e]));
    const float so = round_bf16(other * round_bf16(rr.sin[e]));
    x[e] = round_bf16(first_half ? cx - so : cx + so);  // x1 c - x2 s | x2 c + x1 s
  }
}

}  // namespace kestrel::kernels::detail
