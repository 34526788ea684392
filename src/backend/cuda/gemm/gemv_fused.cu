// Fused small-batch products (gemv_fused.h).
//
// Maths: one mma.sync m16n8k16 per 16 elements of K with A = x' (token rows; rows >= T repeat
// row T - 1 and are never stored) and B = w^T (8 output columns). Lane (g = lane / 4,
// q = lane % 4) takes the 8 consecutive elements [8q, 8q + 8) of each 32-element K step, of w
// row g and of x' row g, and hands {0,1}, {2,3} to the first mma (the fragment's k slots 2q
// and 2q + 8) and {4,5}, {6,7} to the second: the same permutation of K on both sides, so
// the dot products are unchanged and one 16-byte load of w feeds two mmas.
//
// Work: a tile is 8 output columns; the K steps of a tile are shared by `warps_per_tile`
// warps, each owning a contiguous range of at most kBatch steps where K allows, so that one
// batch of 16-byte loads per lane covers its whole share and is issued before pdl_wait().
// The warps of a tile add their fp32 accumulators through shared memory in a fixed order
// (deterministic). A CTA holds one or more tiles.
//
// Weights go through lane-private shared-memory slots by cp.async (a batch of kBatch 16-byte
// copies per lane, all in flight together however the compiler schedules the maths; register
// loads ended up interleaved with the mmas in gemv.cu's first version).
//
// Prologue: every CTA stages x' for all T rows in shared memory (T x K bf16 from L2; rows
// padded by 64 bytes so that the 8 rows a warp reads fall in different banks), computing
// the RMSNorm scale per row (one warp per row) or SiLU(gate) * up on the way.
#include <cuda_bf16.h>

#include <algorithm>

#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/gemm/gemv_fused.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma.cuh"

namespace kestrel::kernels {
namespace {

constexpr int kTileCols = 8;   // n of one mma
constexpr int kStepK = 32;     // K elements per step: 4 lanes x 8 bf16
constexpr int kBatch = 8;      // steps whose w loads a lane has in flight at once
constexpr int kMaxWarpsPerTile = 16;
constexpr int kMaxWarps = 16;
constexpr int kRowPad = 32;    // bf16 of padding per staged row (64 bytes)
constexpr size_t kMaxStagedBytes = 64 * 1024;


// Writes x' for rows [0, t) into xs (row stride k + kRowPad). kRmsNorm: norm_w is the
// shared-memory copy that copy_norm_weights() started (the most recent group but one).
template <GemvPrologue P>
__device__ void stage_input(const bf16* x, const bf16* norm_w, float eps, int t,
                            int k, bf16* xs, float* inv) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int vecs = k / 8;
  if constexpr (P == GemvPrologue::kRmsNorm) {
    cp_async_wait<1>();  // this thread's norm-weight copies; the barrier below publishes them
    for (int row = warp; row < t; row += warps) {
      const auto* xr = reinterpret_cast<const BfVec<8>*>(x + size_t(row) * k);
      float ss = 0.0f;
      for (int i = lane; i < vecs; i += 32) {
        const BfVec<8> v = xr[i];
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const float f = __bfloat162float(v.v[e]);
          ss += f * f;
        }
      }
      ss = warp_sum(ss);
      if (lane == 0) inv[row] = rsqrtf(ss / k + eps);
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < t * vecs; i += blockDim.x) {
    const int row = i / vecs, c = (i - row * vecs) * 8;
    BfVec<8> o;
    if constexpr (P == GemvPrologue::kNone) {
      o = *reinterpret_cast<const BfVec<8>*>(x + size_t(row) * k + c);
    } else if constexpr (P == GemvPrologue::kRmsNorm) {
      const BfVec<8> v = *reinterpret_cast<const BfVec<8>*>(x + size_t(row) * k + c);
      const BfVec<8> wn = *reinterpret_cast<const BfVec<8>*>(norm_w + c);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float nv = round_bf16(__bfloat162float(v.v[e]) * inv[row]);
        o.v[e] = __float2bfloat16(nv * __bfloat162float(wn.v[e]));
      }
    } else {
      const bf16* xr = x + size_t(row) * 2 * k;
      const BfVec<8> gate = *reinterpret_cast<const BfVec<8>*>(xr + c);
      const BfVec<8> up = *reinterpret_cast<const BfVec<8>*>(xr + k + c);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        o.v[e] = __float2bfloat16(
            silu_mul_f32(__bfloat162float(gate.v[e]), __bfloat162float(up.v[e])));
      }
    }
    *reinterpret_cast<BfVec<8>*>(xs + size_t(row) * (k + kRowPad) + c) = o;
  }
  __syncthreads();
}

// kRmsNorm: the norm weights (k bf16) into smem, one cp.async group. Issued before
// pdl_wait(): no kernel writes them, and loaded after it (from DRAM, as the step's weight
// stream evicts them from L2) they were a round trip on the critical path of the product.
__device__ __forceinline__ void copy_norm_weights(const bf16* __restrict__ norm_w, int k, bf16* dst) {
  for (int i = threadIdx.x; i < k / 8; i += blockDim.x) {
    cp_async_16<CopyCache::kL2>(dst + 8 * i, norm_w + 8 * i, true);
  }
  cp_async_commit();
}

template <GemvPrologue P, bool kAdd, typename OutT>
__global__ void __launch_bounds__(kMaxWarps * 32)
    fused_gemv_kernel(const bf16* x, const bf16* __restrict__ w, const bf16* __restrict__ bias,
                      const bf16* __restrict__ norm_w, float eps, OutT* out, int t, int n, int k,
                      int warps_per_tile, int steps_per_warp) {
  extern __shared__ uint4 smem[];
  // [x' staged: t rows] [w batches: kBatch x 32 lanes x 16 B per warp] [partials] [1 / rms]
  // [norm weights: k, kRmsNorm only]
  bf16* xs = reinterpret_cast<bf16*>(smem);
  uint4* w_stage = reinterpret_cast<uint4*>(xs + size_t(t) * (k + kRowPad));
  float4* partial = reinterpret_cast<float4*>(w_stage + blockDim.x * kBatch);
  float* inv = reinterpret_cast<float*>(partial + blockDim.x);
  bf16* norm_s = reinterpret_cast<bf16*>(inv + kFusedGemvMaxTokens);

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, q = lane % 4;
  const int tiles_per_cta = blockDim.x / 32 / warps_per_tile;
  const int tile = blockIdx.x * tiles_per_cta + warp / warps_per_tile;
  const int part = warp % warps_per_tile;
  const int steps = (k + kStepK - 1) / kStepK;
  const int s_begin = part * steps_per_warp;
  const int s_end = min(steps, s_begin + steps_per_warp);
  // Columns past n read the last row of w: their outputs are never stored.
  const bf16* w_row = w + size_t(min(tile * kTileCols + g, n - 1)) * k + q * 8;
  // Lane-private slots: each lane reads back only what it copied, so no barrier is needed.
  uint4* mine = w_stage + size_t(warp) * kBatch * 32 + lane;
  const uint32_t mine_addr = static_cast<uint32_t>(__cvta_generic_to_shared(mine));
  auto copy_batch = [&](int s) {
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int kk = (s + u) * kStepK;  // w_row already points at the lane's 8 elements
      const bool in = s + u < s_end && kk + q * 8 < k;
      cp_async_16(mine_addr + u * 32 * 16, w_row + (in ? kk : 0), in);
    }
    cp_async_commit();
  };

  // The first batch of w before waiting: no kernel of the step writes the weights.
  if constexpr (P == GemvPrologue::kRmsNorm) copy_norm_weights(norm_w, k, norm_s);
  copy_batch(s_begin);
  pdl_wait();
  pdl_trigger();
  // kAdd: the residual this thread adds to, loaded now rather than at the store, where its
  // round trip to L2 (slow while the next kernel's weights stream in) ended the kernel.
  float old[2] = {0.0f, 0.0f};
  if constexpr (kAdd) {
    if (part == 0 && g < t) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int nn = tile * kTileCols + 2 * q + j;
        if (nn < n) old[j] = __bfloat162float(out[size_t(g) * n + nn]);
      }
    }
  }
  stage_input<P>(x, norm_s, eps, t, k, xs, inv);

  const bf16* x_row = xs + size_t(min(g, t - 1)) * (k + kRowPad) + q * 8;
  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int s = s_begin; s < s_end; s += kBatch) {
    if (s != s_begin) copy_batch(s);
    cp_async_wait<0>();
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (s + u >= s_end) break;  // the same for the whole warp
      const int kk = (s + u) * kStepK;
      const uint4 wv = mine[u * 32];
      const uint4 xa = kk + q * 8 < k ? *reinterpret_cast<const uint4*>(x_row + kk)
                                      : make_uint4(0, 0, 0, 0);
      mma_bf16(c, xa.x, 0u, xa.y, 0u, wv.x, wv.y);
      mma_bf16(c, xa.z, 0u, xa.w, 0u, wv.z, wv.w);
    }
  }

  if (warps_per_tile > 1) {
    partial[threadIdx.x] = make_float4(c[0], c[1], c[2], c[3]);
    __syncthreads();
    if (part != 0) return;  // no barrier follows
    for (int p = 1; p < warps_per_tile; ++p) {
      const float4 v = partial[threadIdx.x + p * 32];
      c[0] += v.x;
      c[1] += v.y;
    }
  }
  if (g >= t) return;
  // Accumulator fragment: c[j] is (token g, column 2q + j).
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int nn = tile * kTileCols + 2 * q + j;
    if (nn >= n) continue;
    const float v = c[j] + (bias != nullptr ? __bfloat162float(bias[nn]) : 0.0f);
    OutT* o = out + size_t(g) * n + nn;
    if constexpr (kAdd) {
      *o = __float2bfloat16(old[j] + round_bf16(v));
    } else {
      store_out(v, o);
    }
  }
}

size_t staged_bytes(int64_t t, int64_t k) { return size_t(t) * size_t(k + kRowPad) * 2; }

template <GemvPrologue P, bool kAdd, typename OutT>
void launch(const void* x, const void* w, const void* bias, const GemvFusion& f, void* out,
            int t, int n, int k, int sms, cudaStream_t stream) {
  const int steps = (k + kStepK - 1) / kStepK;
  int warps_per_tile = std::min(kMaxWarpsPerTile, (steps + kBatch - 1) / kBatch);
  const int steps_per_warp = (steps + warps_per_tile - 1) / warps_per_tile;
  warps_per_tile = (steps + steps_per_warp - 1) / steps_per_warp;  // no idle warps
  const int tiles = (n + kTileCols - 1) / kTileCols;
  // Several tiles per CTA only while the grid still covers every SM.
  const int tiles_per_cta =
      std::max(1, std::min(kMaxWarps / warps_per_tile, tiles / std::max(sms, 1)));
  const int threads = tiles_per_cta * warps_per_tile * 32;
  const int grid = (tiles + tiles_per_cta - 1) / tiles_per_cta;
  const size_t norm_bytes = P == GemvPrologue::kRmsNorm ? size_t(k) * 2 : 0;
  const size_t smem = staged_bytes(t, k) + size_t(threads) * (kBatch + 1) * sizeof(uint4) +
                      kFusedGemvMaxTokens * sizeof(float) + norm_bytes;
  // x' and the norm weights each take at most kMaxStagedBytes (fused_gemv_supported).
  allow_dynamic_smem<fused_gemv_kernel<P, kAdd, OutT>>(static_cast<int>(
      kMaxStagedBytes + kMaxWarps * 32 * (kBatch + 1) * sizeof(uint4) +
      kFusedGemvMaxTokens * sizeof(float) + (P == GemvPrologue::kRmsNorm ? kMaxStagedBytes : 0)));
  launch_pdl("fused_gemv_kernel", fused_gemv_kernel<P, kAdd, OutT>, grid, threads, smem, stream,
             static_cast<const bf16*>(x), static_cast<const bf16*>(w),
             static_cast<const bf16*>(bias), static_cast<const bf16*>(f.norm_w), f.eps,
             static_cast<OutT*>(out), t, n, k, warps_per_tile, steps_per_warp);
}

template <GemvPrologue P>
void launch_for(const void* x, const void* w, const void* bias, void* out, bool f32_out, int t,
                int n, int k, const GemvFusion& f, int sms, cudaStream_t stream) {
  if (f.add_to_out) return launch<P, true, bf16>(x, w, bias, f, out, t, n, k, sms, stream);
  if (f32_out) return launch<P, false, float>(x, w, bias, f, out, t, n, k, sms, stream);
  launch<P, false, bf16>(x, w, bias, f, out, t, n, k, sms, stream);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool fused_gemv_supported(int64_t t, int64_t n, int64_t k, const void* x, const void* w,
                          const GemvFusion& fusion) {
  return t >= 1 && t <= kFusedGemvMaxTokens && n >= 1 && n <= (int64_t(1) << 30) && k >= 8 &&
         k % 8 == 0 && staged_bytes(t, k) <= kMaxStagedBytes && aligned16(x) && aligned16(w) &&
         (fusion.prologue != GemvPrologue::kRmsNorm || aligned16(fusion.norm_w));
}

void fused_gemv(const void* x, const void* w, const void* bias, void* out, bool f32_out,
                int64_t t, int64_t n, int64_t k, const GemvFusion& fusion, int num_sms,
                cudaStream_t stream) {
  const int ti = static_cast<int>(t), ni = static_cast<int>(n), ki = static_cast<int>(k);
  switch (fusion.prologue) {
    case GemvPrologue::kNone:
      return launch_for<GemvPrologue::kNone>(x, w, bias, out, f32_out, ti, ni, ki, fusion, num_sms,
                                             stream);
    case GemvPrologue::kRmsNorm:
      return launch_for<GemvPrologue::kRmsNorm>(x, w, bias, out, f32_out, ti, ni, ki, fusion,
                                                num_sms, stream);
    case GemvPrologue::kSiluMul:
      return launch_for<GemvPrologue::kSiluMul>(x, w, bias, out, f32_out, ti, ni, ki, fusion,
                                                num_sms, stream);
  }
}

}  // namespace kestrel::kernels
