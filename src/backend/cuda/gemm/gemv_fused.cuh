// The device side of the fused small-batch products (gemv_fused.h), shared by the kernel that
// runs one product (gemv_fused.cu) and the one that runs a layer's chain of them
// (gemv_chain.cu).
//
// Maths: one mma.sync m16n8k16 per 16 elements of K with A = x' (token rows; rows >= T repeat
// row T - 1 and are never stored) and B = w^T (8 output columns). Lane (g = lane / 4,
// q = lane % 4) takes the 8 consecutive elements [8q, 8q + 8) of each 32-element K step, of w
// row g and of x' row g, and hands {0,1}, {2,3} to the first mma (the fragment's k slots 2q
// and 2q + 8) and {4,5}, {6,7} to the second: the same permutation of K on both sides, so
// the dot products are unchanged and one 16-byte load of w feeds two mmas.
//
// Work: a tile is 8 output columns; the K steps of a tile are shared by `warps_per_tile`
// warps, each owning a contiguous range of at most kBatch steps where K allows (a Share), so
// that one batch of 16-byte loads per lane covers it. The warps of a tile add their fp32
// accumulators through shared memory in a fixed order (deterministic).
//
// Weights go through lane-private shared-memory slots by cp.async (a batch of kBatch 16-byte
// copies per lane, all in flight together however the compiler schedules the maths; register
// loads ended up interleaved with the mmas in gemv.cu's first version). Lane-private: each
// lane reads back only what it copied, so no barrier is needed between copy and use.
//
// Prologue: every CTA stages x' for all T rows in shared memory (T x K bf16 from L2; rows
// padded by 64 bytes so that the 8 rows a warp reads fall in different banks), computing
// the RMSNorm scale per row (one warp per row) or SiLU(gate) * up on the way.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/gemm/gemv_fused.h"
#include "backend/cuda/mma.cuh"

namespace kestrel::kernels::gemv {

using bf16 = __nv_bfloat16;

constexpr int kTileCols = 8;   // n of one mma
constexpr int kStepK = 32;     // K elements per step: 4 lanes x 8 bf16
constexpr int kBatch = 8;      // steps whose w loads a lane has in flight at once
constexpr int kMaxWarps = 16;
constexpr int kRowPad = 32;    // bf16 of padding per staged row (64 bytes)
constexpr size_t kMaxStagedBytes = 64 * 1024;

inline __host__ __device__ size_t staged_bytes(int64_t t, int64_t k) {
  return size_t(t) * size_t(k + kRowPad) * 2;
}

// Shared memory after the staged rows: [w batches: kBatch x 16 B per thread]
// [partials: 16 B per thread] [1 / rms: kFusedGemvMaxTokens] [norm weights: k, kRmsNorm].
inline __host__ __device__ size_t smem_bytes(size_t staged, int threads, size_t norm_bytes) {
  return staged + size_t(threads) * (kBatch + 1) * 16 + kFusedGemvMaxTokens * sizeof(float) +
         norm_bytes;
}

struct Smem {
  bf16* xs;
  uint4* w_stage;
  float4* partial;
  float* inv;
  bf16* norm;

  __device__ __forceinline__ static Smem carve(uint4* base, size_t staged) {
    Smem s;
    s.xs = reinterpret_cast<bf16*>(base);
    s.w_stage = reinterpret_cast<uint4*>(reinterpret_cast<char*>(base) + staged);
    s.partial = reinterpret_cast<float4*>(s.w_stage + blockDim.x * kBatch);
    s.inv = reinterpret_cast<float*>(s.partial + blockDim.x);
    s.norm = reinterpret_cast<bf16*>(s.inv + kFusedGemvMaxTokens);
    return s;
  }
};

// 8 bf16 of x. kL2: through L2 only (ld.global.cg), for data that other CTAs of the same
// grid wrote before a grid barrier: a line this SM's L1 kept from earlier would be stale.
template <bool kL2>
__device__ __forceinline__ BfVec<8> load8(const bf16* p) {
  if constexpr (kL2) {
    const uint4 u = __ldcg(reinterpret_cast<const uint4*>(p));
    return *reinterpret_cast<const BfVec<8>*>(&u);
  } else {
    return *reinterpret_cast<const BfVec<8>*>(p);
  }
}

template <bool kL2>
__device__ __forceinline__ float load1(const bf16* p) {
  if constexpr (kL2) {
    const unsigned short u = __ldcg(reinterpret_cast<const unsigned short*>(p));
    return __uint_as_float(uint32_t(u) << 16);
  } else {
    return __bfloat162float(*p);
  }
}

// Writes x' for rows [0, t) into xs (row stride k + kRowPad). kRmsNorm: norm_w is the
// shared-memory copy that copy_norm_weights() started (the most recent group but one).
template <GemvPrologue P, bool kL2>
__device__ __forceinline__ void stage_input(const bf16* x, const bf16* norm_w, float eps, int t, int k, bf16* xs,
                            float* inv) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int vecs = k / 8;
  if constexpr (P == GemvPrologue::kRmsNorm) {
    cp_async_wait<1>();  // this thread's norm-weight copies; the barrier below publishes them
    for (int row = warp; row < t; row += warps) {
      const bf16* xr = x + size_t(row) * k;
      float ss = 0.0f;
      for (int i = lane; i < vecs; i += 32) {
        const BfVec<8> v = load8<kL2>(xr + 8 * i);
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
      o = load8<kL2>(x + size_t(row) * k + c);
    } else if constexpr (P == GemvPrologue::kRmsNorm) {
      const BfVec<8> v = load8<kL2>(x + size_t(row) * k + c);
      const BfVec<8> wn = *reinterpret_cast<const BfVec<8>*>(norm_w + c);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float nv = round_bf16(__bfloat162float(v.v[e]) * inv[row]);
        o.v[e] = __float2bfloat16(nv * __bfloat162float(wn.v[e]));
      }
    } else {
      const bf16* xr = x + size_t(row) * 2 * k;
      const BfVec<8> gate = load8<kL2>(xr + c);
      const BfVec<8> up = load8<kL2>(xr + k + c);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float gf = __bfloat162float(gate.v[e]);
        const float s = round_bf16(gf / (1.0f + __expf(-gf)));
        o.v[e] = __float2bfloat16(s * __bfloat162float(up.v[e]));
      }
    }
    *reinterpret_cast<BfVec<8>*>(xs + size_t(row) * (k + kRowPad) + c) = o;
  }
  __syncthreads();
}

// kRmsNorm: the norm weights (k bf16) into smem, one cp.async group. Issued before the wait
// for the previous kernel (or grid barrier): nothing writes them, and loaded after it (from
// DRAM, as the step's weight stream evicts them from L2) they were a round trip on the
// critical path of the product.
__device__ __forceinline__ void copy_norm_weights(const bf16* __restrict__ norm_w, int k, bf16* dst) {
  for (int i = threadIdx.x; i < k / 8; i += blockDim.x) {
    cp_async_16<CopyCache::kL2>(dst + 8 * i, norm_w + 8 * i, true);
  }
  cp_async_commit();
}

// One warp's share of one output tile: K steps [s_begin, s_end) of tile `tile`.
struct Share {
  int tile;
  int s_begin, s_end;
  const bf16* w_row;  // the lane's row of w, at its 8 elements of step 0
  uint4* mine;        // the lane's kBatch slots
  uint32_t mine_addr;

  // Part `part` of tile `tile` (steps_per_warp steps each) of w [n, k]; slots of warp `warp`.
  __device__ __forceinline__ Share(const bf16* w, int n, int k, int tile, int part, int steps_per_warp,
                   uint4* w_stage, int warp) {
    const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    const int steps = (k + kStepK - 1) / kStepK;
    this->tile = tile;
    s_begin = part * steps_per_warp;
    s_end = min(steps, s_begin + steps_per_warp);
    // Columns past n read the last row of w: their outputs are never stored.
    w_row = w + size_t(min(tile * kTileCols + g, n - 1)) * k + q * 8;
    mine = w_stage + size_t(warp) * kBatch * 32 + lane;
    mine_addr = static_cast<uint32_t>(__cvta_generic_to_shared(mine));
  }

  // Copies of steps [s, s + kBatch) ∩ [s_begin, s_end), then one commit (also when empty, so
  // that every thread's group counts agree).
  __device__ __forceinline__ void copy_batch(int s, int k, bool active) const {
    const int q = threadIdx.x % 4;
    if (active) {
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int kk = (s + u) * kStepK;  // w_row already points at the lane's 8 elements
        const bool in = s + u < s_end && kk + q * 8 < k;
        cp_async_16(mine_addr + u * 32 * 16, w_row + (in ? kk : 0), in);
      }
    }
    cp_async_commit();
  }

  // c += x' w^T over the share; the first batch (at s_begin) is in flight already.
  __device__ __forceinline__ void accumulate(const bf16* xs, int t, int k, float (&c)[4]) const {
    const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    const bf16* x_row = xs + size_t(min(g, t - 1)) * (k + kRowPad) + q * 8;
    for (int s = s_begin; s < s_end; s += kBatch) {
      if (s != s_begin) copy_batch(s, k, true);
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
  }
};

// kAdd: the two residual values lane (g, q) adds to (columns 2q, 2q + 1 of its tile, token g),
// loaded early: at the store their round trip to L2 ended the kernel.
template <bool kAdd, bool kL2, typename OutT>
__device__ __forceinline__ void load_old(const OutT* out, int tile, int n, int t, bool load,
                                         float (&old)[2]) {
  old[0] = old[1] = 0.0f;
  if constexpr (kAdd) {
    const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    if (load && g < t) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int nn = tile * kTileCols + 2 * q + j;
        if (nn < n) old[j] = load1<kL2>(out + size_t(g) * n + nn);
      }
    }
  }
}

// Stores lane (g, q)'s two outputs of its tile (accumulator c[j]: token g, column 2q + j).
template <bool kAdd, typename OutT>
__device__ __forceinline__ void store_tile(const float (&c)[4], const float (&old)[2],
                                           const bf16* __restrict__ bias, OutT* out, int tile,
                                           int n, int t) {
  const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  if (g >= t) return;
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

// Adds the partial accumulators of parts 1.. of this warp's tile into part 0's (warps
// warp + 1 .. warp + warps_per_tile - 1 of the same CTA), in order. Every thread calls it
// (one barrier); the result is meaningful in part 0's warps.
__device__ __forceinline__ void add_parts(float (&c)[4], float4* partial, int warps_per_tile,
                                          int part) {
  partial[threadIdx.x] = make_float4(c[0], c[1], c[2], c[3]);
  __syncthreads();
  if (part != 0) return;
  for (int p = 1; p < warps_per_tile; ++p) {
    const float4 v = partial[threadIdx.x + p * 32];
    c[0] += v.x;
    c[1] += v.y;
  }
}

}  // namespace kestrel::kernels::gemv
