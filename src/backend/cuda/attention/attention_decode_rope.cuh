// Device helpers of the fused decode kernel (attention_decode.cu): qk_norm_rope_store's RMSNorm
// and RoPE applied in registers to a head held as 8 dims per lane by the D/8 adjacent lanes
// of a key slot. RopeRow, norm_rope8 and store_kv8 also serve the RoPE/store kernel
// (rope_store.cu) and the tensor-core decode kernel's fused prologue.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/attention/kv_fp8.cuh"
#include "backend/cuda/attention/kv_layout.cuh"
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
    load_from<kLanes>(rope.cos_sin + int64_t(pos) * D, rope.q_norm, rope.k_norm, sub);
    kv_slot = rope.slot_mapping[token];
  }

  // The same from a copy (shared memory): the token's cos/sin row and the norm weights (null
  // where there is no norm). kv_slot is left alone.
  template <int kLanes>
  __device__ __forceinline__ void load_from(const float* cs, const __nv_bfloat16* qn,
                                            const __nv_bfloat16* kn, int sub) {
    constexpr int D = kLanes * 8;
    const int pair = (sub < kLanes / 2 ? sub : sub - kLanes / 2) * 8;  // this lane's first pair
    *reinterpret_cast<float4*>(cos) = *reinterpret_cast<const float4*>(cs + pair);
    *reinterpret_cast<float4*>(cos + 4) = *reinterpret_cast<const float4*>(cs + pair + 4);
    *reinterpret_cast<float4*>(sin) = *reinterpret_cast<const float4*>(cs + D / 2 + pair);
    *reinterpret_cast<float4*>(sin + 4) = *reinterpret_cast<const float4*>(cs + D / 2 + pair + 4);
    if (qn != nullptr) unpack8(*reinterpret_cast<const uint4*>(qn + sub * 8), q_norm);
    if (kn != nullptr) unpack8(*reinterpret_cast<const uint4*>(kn + sub * 8), k_norm);
  }
};

// qk_norm_rope_store's maths on one head held as 8 dims per lane ([8 sub, 8 sub + 8)) by the
// kLanes adjacent lanes of a key slot: the RMSNorm when `norm` (q_norm's weights when
// q_weights, else k_norm's) sums over those lanes, then RoPE, which pairs dim i with i + D/2
// (lane sub ^ (kLanes / 2)), unless is_v (V heads keep their values). Every lane of the warp
// shuffles whatever its head, so heads of different kinds can share a warp (rope_store.cu,
// the tensor-core decode kernel's fused prologue); all must call it. kMixed false: every head
// of the warp takes the same `norm` (the CUDA-core fused kernel), so the norm's shuffles run
// only with it, which keeps that kernel's registers. The result is bf16.
template <int kLanes, bool kMixed = true>
__device__ __forceinline__ void norm_rope8(float (&x)[8], bool norm, bool q_weights, bool is_v,
                                           float eps, const RopeRow& rr, int sub) {
  constexpr int D = kLanes * 8;
  float ss = 0.0f;
  if (kMixed || norm) {
#pragma unroll
    for (int e = 0; e < 8; ++e) ss += x[e] * x[e];
#pragma unroll
    for (int o = kLanes / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  }
  if (norm) {
    const float inv = rsqrtf(ss / D + eps);
#pragma unroll
    for (int e = 0; e < 8; ++e) {  // per element: a pointer into rr would put it on the stack
      const float w = q_weights ? rr.q_norm[e] : rr.k_norm[e];
      x[e] = round_bf16(round_bf16(x[e] * inv) * w);
    }
  }
  const bool first_half = sub < kLanes / 2;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const float other = __shfl_xor_sync(0xffffffffu, x[e], kLanes / 2);
    if (is_v) continue;
    const float cx = round_bf16(x[e] * round_bf16(rr.cos[e]));
    const float so = round_bf16(other * round_bf16(rr.sin[e]));
    x[e] = round_bf16(first_half ? cx - so : cx + so);  // x1 c - x2 s | x2 c + x1 s
  }
}

// Lane sub's 8 dims x (bf16 values, after norm_rope8) of a new K row (V when is_v) of KV head
// kv_head as the cache holds them: bf16, or e4m3 of x / scale (KvQuant; x becomes the bytes'
// values) in the low 8 bytes. Stored at `slot`, with the fp8 scale's amax and clamp count
// raised (this lane's own: raise_amax reads before it writes, so most lanes leave the
// atomics alone), unless slot < 0. Returns the bytes.
template <int D, bool kHeadMajor, bool kFp8>
__device__ __forceinline__ uint4 store_kv8(const QkNormRopeArgs& a, float (&x)[8], bool is_v,
                                           int kv_head, int slot, int sub) {
  const int bs = a.block_size;
  const int64_t off =  // elements
      (slot >= 0 ? kv_row_offset<kHeadMajor>(slot / bs, slot % bs, kv_head, a.num_kv_heads, bs, D) : 0) +
      sub * 8;
  void* cache = is_v ? a.v_cache : a.k_cache;
  if constexpr (!kFp8) {
    const uint4 bytes = pack8(x);
    if (slot >= 0) *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(cache) + off) = bytes;
    return bytes;
  } else {
    const int q = (is_v ? a.num_kv_heads : 0) + kv_head;  // [2, Hkv] index
    float amax = 0.0f;
    int clamped = 0;
    const uint2 bytes = quantize8(x, 1.0f / a.kv.scale[q], amax, clamped);  // exact: 2^k
    if (slot >= 0) {
      *reinterpret_cast<uint2*>(static_cast<uint8_t*>(cache) + off) = bytes;
      raise_amax(a.kv.amax + q, amax);
      count_clamped(a.kv.clamped + q, clamped);
    }
    return make_uint4(bytes.x, bytes.y, 0u, 0u);
  }
}

}  // namespace kestrel::kernels::detail
