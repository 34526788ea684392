// Small device helpers shared by the kernels: vector loads of bf16, warp and block
// reductions, rounding to bf16. Included by .cu files only.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace kestrel::kernels {

// N consecutive bf16 values, aligned so that a load of the whole struct is one
// 2N-byte access (N = 8: one 16-byte load).
template <int N>
struct alignas(2 * N) BfVec {
  __nv_bfloat16 v[N];
};

// 8 bf16 (one 16-byte load) to floats and back (round to nearest even).
__device__ __forceinline__ void unpack8(const uint4& u, float* f) {
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ uint4 pack8(const float* f) {
  uint4 u;
  unsigned* w = &u.x;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    w[i] = *reinterpret_cast<const unsigned*>(&h);
  }
  return u;
}

// 2^x as the bare ex2.approx.ftz (results below 2^-126 flush to zero; exp2f's denormal
// handling costs instructions in a softmax's inner loop).
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Two floats as a bf16 pair, `lo` in the low half (the lower column of an mma fragment).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Rounds through bf16 and back: where HF's bf16 model stores an intermediate.
__device__ __forceinline__ float round_bf16(float x) {
  return __bfloat162float(__float2bfloat16(x));
}

// SiLU, x sigmoid(x), in fp32 as every GPU path computes it, so that fused and unfused
// kernels agree bit for bit: exp on the special-function unit and an approximate divide
// (within a few fp32 ulps; the bf16 rounding that follows hides them). For x below about -88
// the denominator is infinite and the result -0. (An IEEE divide here made the prompt GEMM's
// fused activation three times the instructions.)
__device__ __forceinline__ float silu_f32(float x) { return __fdividef(x, 1.0f + __expf(-x)); }

// HF's bf16 Qwen3MLP on one bf16 gate and up value: act_fn(gate) rounded to bf16, times up;
// the caller rounds the product (storing it as bf16). Every GPU SiLU-and-multiply (the
// silu_mul kernel, the fused GEMV's prologue, the prompt GEMM's epilogue) goes through it.
__device__ __forceinline__ float silu_mul_f32(float gate, float up) {
  return round_bf16(silu_f32(gate)) * up;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
// `scratch` holds 32 floats of shared memory; the call ends with a barrier, so scratch may be
// reused right after.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int num_warps = blockDim.x / 32;
  float total = lane < num_warps ? scratch[lane] : 0.0f;
  total = warp_sum(total);
  __syncthreads();
  return total;
}

// Largest vector width (in elements, from {8, 4, 2, 1}) dividing `n` elements such that
// every given pointer is aligned to it.
inline int bf16_vec_width(int64_t n, const void* a, const void* b = nullptr,
                          const void* c = nullptr) {
  for (int w = 8; w > 1; w /= 2) {
    const uintptr_t bytes = static_cast<uintptr_t>(w) * 2;
    bool ok = n % w == 0 && reinterpret_cast<uintptr_t>(a) % bytes == 0 &&
              reinterpret_cast<uintptr_t>(b) % bytes == 0 &&
              reinterpret_cast<uintptr_t>(c) % bytes == 0;
    if (ok) return w;
  }
  return 1;
}

}  // namespace kestrel::kernels
