// Element-wise kernels of the MLP and the projections.
//
//   silu_mul:      out[t, i] = bf16(bf16(silu(gate[t, i])) * up[t, i]),  x[t] = [gate | up]
//                  (rounded where HF's bf16 Qwen3MLP rounds: act_fn(gate) then the product)
//   add_bias_f32:  out[t, n] += bias[n]   (fp32 logits; bf16 outputs take the GEMM epilogue)
//   add_into:      dst[i] = bf16(dst[i] + src[i])   (the residual add, when not fused)
//   round_to_bf16: out[i] = bf16(in[i])             (a bf16 copy of a float table)
//
// Memory-bound, grid-stride over (row, vector) pairs, VEC bf16 per access.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"

namespace kestrel::kernels {
namespace {

template <int VEC>
__global__ void silu_mul_kernel(const bf16* __restrict__ x, int64_t rows, int inter,
                                bf16* __restrict__ out) {
  pdl_wait();  // launch.cuh: before touching what earlier kernels write
  pdl_trigger();
  const int vecs_per_row = inter / VEC;
  const int64_t total = rows * vecs_per_row;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / vecs_per_row;
    const int64_t col = (i - row * vecs_per_row) * VEC;
    const bf16* xr = x + row * 2 * inter;
    BfVec<VEC> g = *reinterpret_cast<const BfVec<VEC>*>(xr + col);
    BfVec<VEC> u = *reinterpret_cast<const BfVec<VEC>*>(xr + inter + col);
    BfVec<VEC> o;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      o.v[k] = __float2bfloat16(silu_mul_f32(__bfloat162float(g.v[k]), __bfloat162float(u.v[k])));
    }
    *reinterpret_cast<BfVec<VEC>*>(out + row * inter + col) = o;
  }
}

__global__ void add_bias_f32_kernel(float* out, const bf16* __restrict__ bias, int64_t rows, int n) {
  pdl_wait();  // launch.cuh: before touching what earlier kernels write
  pdl_trigger();
  const int64_t total = rows * n;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] += __bfloat162float(bias[i % n]);
  }
}

__global__ void add_into_kernel(bf16* dst, const bf16* __restrict__ src, int64_t n) {
  pdl_wait();  // launch.cuh: before touching what earlier kernels write
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    dst[i] = __float2bfloat16(__bfloat162float(dst[i]) + __bfloat162float(src[i]));
  }
}

__global__ void round_to_bf16_kernel(const float* __restrict__ in, int64_t n, bf16* out) {
  pdl_wait();  // launch.cuh: before touching what earlier kernels write
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = __float2bfloat16(in[i]);
  }
}

unsigned grid_for(int64_t work, int threads) {
  int64_t blocks = (work + threads - 1) / threads;
  // Enough blocks to fill any current GPU several times; the loops stride over the rest.
  return static_cast<unsigned>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

}  // namespace

void silu_mul(const bf16* x, int64_t rows, int inter, bf16* out, cudaStream_t stream) {
  if (rows == 0 || inter == 0) return;
  // The up half starts inter elements into each row, so inter itself must be a multiple of VEC.
  const int vec = bf16_vec_width(inter, x, out);
  constexpr int kThreads = 256;
  const unsigned grid = grid_for(rows * (inter / vec), kThreads);
  switch (vec) {
    case 8: launch_pdl("silu_mul_kernel", silu_mul_kernel<8>, grid, kThreads, 0, stream, x, rows, inter, out); break;
    case 4: launch_pdl("silu_mul_kernel", silu_mul_kernel<4>, grid, kThreads, 0, stream, x, rows, inter, out); break;
    case 2: launch_pdl("silu_mul_kernel", silu_mul_kernel<2>, grid, kThreads, 0, stream, x, rows, inter, out); break;
    default: launch_pdl("silu_mul_kernel", silu_mul_kernel<1>, grid, kThreads, 0, stream, x, rows, inter, out); break;
  }
  KS_CUDA_CHECK_LAUNCH("silu_mul_kernel");
}

void add_bias_f32(float* out, const bf16* bias, int64_t rows, int n, cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  constexpr int kThreads = 256;
  launch_pdl("add_bias_f32_kernel", add_bias_f32_kernel, grid_for(rows * n, kThreads), kThreads, 0,
             stream, out, bias, rows, n);
  KS_CUDA_CHECK_LAUNCH("add_bias_f32_kernel");
}

void add_into(bf16* dst, const bf16* src, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  launch_pdl("add_into_kernel", add_into_kernel, grid_for(n, kThreads), kThreads, 0, stream, dst,
             src, n);
}

void round_to_bf16(const float* in, int64_t n, bf16* out, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  launch_pdl("round_to_bf16_kernel", round_to_bf16_kernel, grid_for(n, kThreads), kThreads, 0,
             stream, in, n, out);
}

}  // namespace kestrel::kernels
