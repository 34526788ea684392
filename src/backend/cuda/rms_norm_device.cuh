// RMSNorm's per-vector maths, shared by rms_norm.cu and the kernels that fuse the norm (the
// peer all-reduce's, collectives/), so that fused and unfused give the same bits:
//   residual add:  s = bf16(x + residual), the sum of squares of s accumulated in fp32
//   scale:         inv = rsqrt(sum / h + eps)
//   output:        bf16(w * bf16(s * inv))
// (the two bf16 roundings are where Hugging Face's Qwen3RMSNorm rounds in a bf16 model).
// A row's sum must be taken in the same order too: each thread over its vectors i, i +
// threads, ... in order, then block_sum (device_utils.cuh). Included by .cu files only.
#pragma once

#include "backend/cuda/device_utils.cuh"

namespace kestrel::kernels {

template <int VEC>
__device__ __forceinline__ BfVec<VEC> rms_add_residual(BfVec<VEC> x, BfVec<VEC> residual,
                                                       float& sum_sq) {
  BfVec<VEC> s;
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    s.v[k] = __float2bfloat16(__bfloat162float(x.v[k]) + __bfloat162float(residual.v[k]));
    const float f = __bfloat162float(s.v[k]);
    sum_sq += f * f;
  }
  return s;
}

__device__ __forceinline__ float rms_inv(float sum_sq, int h, float eps) {
  return rsqrtf(sum_sq / h + eps);
}

template <int VEC>
__device__ __forceinline__ BfVec<VEC> rms_normed(BfVec<VEC> s, BfVec<VEC> w, float inv) {
  BfVec<VEC> o;
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const float n = round_bf16(__bfloat162float(s.v[k]) * inv);
    o.v[k] = __float2bfloat16(n * __bfloat162float(w.v[k]));
  }
  return o;
}

}  // namespace kestrel::kernels
