// Device side of the fp8 KV cache (kernels.h, KvQuant; backend.h, LayerKvCache): e4m3 bytes
// to floats and back with Hopper's conversions, the store's amax and clamp bookkeeping, and
// the staging pass by which the tile kernels (prefill, general) turn an e4m3 tile copied
// into shared memory into the bf16 tile their maths reads. Included by .cu files only.
//
// Conversions: cvt.rn.satfinite.e4m3x2.f32 (round to nearest even, +-448 on overflow, NaN to
// 0x7f), the host's core/fp8.h bit for bit; e4m3 to f16 is exact (f16 holds every e4m3 value)
// and f16 to f32 too. With power-of-two scales, byte x scale is exact in bf16.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/device_utils.cuh"

namespace kestrel::kernels {

constexpr float kE4M3Max = 448.0f;

// Two e4m3 bytes (`lo` in the low byte) to floats.
__device__ __forceinline__ float2 fp8x2_to_float2(unsigned short two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(two, __NV_E4M3);
  return __half22float2(__half2(h));
}

// 8 e4m3 bytes to floats, as stored (the caller applies the scale).
__device__ __forceinline__ void fp8x8_to_float(const uint2& u, float* f) {
  const unsigned w[2] = {u.x, u.y};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float2 a = fp8x2_to_float2(static_cast<unsigned short>(w[i] & 0xffffu));
    const float2 b = fp8x2_to_float2(static_cast<unsigned short>(w[i] >> 16));
    f[4 * i] = a.x;
    f[4 * i + 1] = a.y;
    f[4 * i + 2] = b.x;
    f[4 * i + 3] = b.y;
  }
}

// Two floats to two e4m3 bytes, `lo` in the low byte.
__device__ __forceinline__ unsigned short float2_to_fp8x2(float lo, float hi) {
  return __nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E4M3);
}

__device__ __forceinline__ unsigned char float_to_fp8(float x) {
  return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
}

// 8 floats to 8 e4m3 bytes of x * inv_scale (inv_scale = 1 / scale, exact: a power of two);
// stores the values as they will be read back (bytes, unscaled) in `f`. Returns how many
// saturated and raises `amax` to the largest |x|.
__device__ __forceinline__ uint2 quantize8(float* f, float inv_scale, float& amax, int& clamped) {
  unsigned w[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    unsigned short two[2];
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      float& x0 = f[4 * i + 2 * p];
      float& x1 = f[4 * i + 2 * p + 1];
      amax = fmaxf(amax, fmaxf(fabsf(x0), fabsf(x1)));
      const float y0 = x0 * inv_scale, y1 = x1 * inv_scale;
      clamped += (fabsf(y0) > kE4M3Max) + (fabsf(y1) > kE4M3Max);
      two[p] = float2_to_fp8x2(y0, y1);
      const float2 back = fp8x2_to_float2(two[p]);
      x0 = back.x;
      x1 = back.y;
    }
    w[i] = two[0] | (unsigned(two[1]) << 16);
  }
  return make_uint2(w[0], w[1]);
}

// Raises *amax to m (m >= 0; NaN is ignored): non-negative floats order as their bits. The
// plain read first keeps the atomic off the common path (the running max rarely moves).
__device__ __forceinline__ void raise_amax(float* amax, float m) {
  if (m > *amax) atomicMax(reinterpret_cast<int*>(amax), __float_as_int(m));
}

__device__ __forceinline__ void count_clamped(unsigned long long* clamped, int n) {
  if (n > 0) atomicAdd(clamped, static_cast<unsigned long long>(n));
}

// dst[r][c] = bf16(src[r][c] x scale) for a [kKeys, D] tile: src packed e4m3 rows of D bytes,
// dst bf16 rows of dst_pitch elements (16-byte aligned), 8 dims per item, the CTA's
// kThreads threads sharing the items. Exact (power-of-two scale).
template <int kKeys, int D, int kThreads>
__device__ __forceinline__ void fp8_tile_to_bf16(const uint8_t* src, __nv_bfloat16* dst,
                                                 int dst_pitch, float scale, int tid) {
  constexpr int kItems = kKeys * D / 8;
#pragma unroll
  for (int i = tid; i < kItems; i += kThreads) {
    const int r = i / (D / 8);
    const int c = (i % (D / 8)) * 8;
    float f[8];
    fp8x8_to_float(*reinterpret_cast<const uint2*>(src + r * D + c), f);
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] *= scale;
    *reinterpret_cast<uint4*>(dst + r * dst_pitch + c) = pack8(f);
  }
}

}  // namespace kestrel::kernels
