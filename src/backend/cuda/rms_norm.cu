// RMSNorm, alone and fused with the residual add that precedes it in a decoder layer.
//
//   rms_norm:      out = bf16(w * bf16(x * rsqrt(mean(x^2) + eps)))
//   add_rms_norm:  residual = bf16(x + residual); x = rms_norm(residual)
// (the two bf16 roundings are where Hugging Face's Qwen3RMSNorm rounds in a bf16 model).
//
// Memory-bound: add_rms_norm reads x and residual and writes both (4 bytes per element
// each way at bf16). Launch: one block per row; each thread handles the same vectors in
// both passes, so the second pass re-reads what the same thread wrote (no barrier needed;
// the re-read hits L1/L2). Vectors of VEC bf16 (8 = 16 bytes) when h and the pointers allow.
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"

namespace kestrel::kernels {
namespace {

// The second pass of both kernels: bf16(w * bf16(s * inv)) for one vector.
template <int VEC>
__device__ __forceinline__ BfVec<VEC> normed(BfVec<VEC> s, BfVec<VEC> w, float inv) {
  BfVec<VEC> o;
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const float n = round_bf16(__bfloat162float(s.v[k]) * inv);
    o.v[k] = __float2bfloat16(n * __bfloat162float(w.v[k]));
  }
  return o;
}

// x may equal out (in place): each element is read before the same thread writes it.
template <int VEC>
__global__ void rms_norm_kernel(const bf16* x, const bf16* __restrict__ w, float eps, int h,
                                bf16* out) {
  pdl_wait();  // launch.cuh: before touching what earlier kernels write
  pdl_trigger();
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const auto* xr = reinterpret_cast<const BfVec<VEC>*>(x + row * h);
  const auto* wv = reinterpret_cast<const BfVec<VEC>*>(w);
  auto* outr = reinterpret_cast<BfVec<VEC>*>(out + row * h);
  const int nvec = h / VEC;

  float ss = 0.0f;
  for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
    BfVec<VEC> v = xr[i];
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      float f = __bfloat162float(v.v[k]);
      ss += f * f;
    }
  }
  const float inv = rsqrtf(block_sum(ss, scratch) / h + eps);
  for (int i = threadIdx.x; i < nvec; i += blockDim.x) outr[i] = normed(xr[i], wv[i], inv);
}

// x and residual are read and written: no __restrict__ and no read-only cache path.
template <int VEC>
__global__ void add_rms_norm_kernel(bf16* x, bf16* residual, const bf16* __restrict__ w,
                                    float eps, int h) {
  pdl_wait();  // launch.cuh: before touching what earlier kernels write
  pdl_trigger();
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  auto* xr = reinterpret_cast<BfVec<VEC>*>(x + row * h);
  auto* rr = reinterpret_cast<BfVec<VEC>*>(residual + row * h);
  const auto* wv = reinterpret_cast<const BfVec<VEC>*>(w);
  const int nvec = h / VEC;

  float ss = 0.0f;
  for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
    BfVec<VEC> a = xr[i];
    BfVec<VEC> b = rr[i];
    BfVec<VEC> s;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      s.v[k] = __float2bfloat16(__bfloat162float(a.v[k]) + __bfloat162float(b.v[k]));
      float f = __bfloat162float(s.v[k]);
      ss += f * f;
    }
    rr[i] = s;
  }
  const float inv = rsqrtf(block_sum(ss, scratch) / h + eps);
  for (int i = threadIdx.x; i < nvec; i += blockDim.x) xr[i] = normed(rr[i], wv[i], inv);
}

int threads_for(int nvec) {
  int t = (nvec + 31) / 32 * 32;
  return t < 32 ? 32 : (t > 512 ? 512 : t);
}

// Calls launch(std::integral_constant<int, VEC>) for the vector width of bf16_vec_width().
template <typename Launch>
void with_vec_width(int vec, Launch&& launch) {
  switch (vec) {
    case 8: return launch(std::integral_constant<int, 8>{});
    case 4: return launch(std::integral_constant<int, 4>{});
    case 2: return launch(std::integral_constant<int, 2>{});
    default: return launch(std::integral_constant<int, 1>{});
  }
}

}  // namespace

void rms_norm(const bf16* x, const bf16* w, float eps, int64_t rows, int h, bf16* out,
              cudaStream_t stream) {
  if (rows == 0) return;
  const int vec = bf16_vec_width(h, x, w, out);
  const auto grid = static_cast<unsigned>(rows);
  with_vec_width(vec, [&](auto v) {
    launch_pdl("rms_norm_kernel", rms_norm_kernel<decltype(v)::value>, grid, threads_for(h / vec),
               0, stream, x, w, eps, h, out);
  });
  KS_CUDA_CHECK_LAUNCH("rms_norm_kernel");
}

void add_rms_norm(bf16* x, bf16* residual, const bf16* w, float eps, int64_t rows, int h,
                  cudaStream_t stream) {
  if (rows == 0) return;
  const int vec = bf16_vec_width(h, x, residual, w);
  const auto grid = static_cast<unsigned>(rows);
  with_vec_width(vec, [&](auto v) {
    launch_pdl("add_rms_norm_kernel", add_rms_norm_kernel<decltype(v)::value>, grid,
               threads_for(h / vec), 0, stream, x, residual, w, eps, h);
  });
  KS_CUDA_CHECK_LAUNCH("add_rms_norm_kernel");
}

}  // namespace kestrel::kernels
