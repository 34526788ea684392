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
// warps, each owning a contiguous range of at most kBatch steps where K allows. The warps of
// a tile add their fp32 accumulators through shared memory in a fixed order (deterministic).
// A group is the tiles_per_cta tiles a CTA works on at once. Where the groups take more than
// one round of CTAs, or a warp more than one batch, the grid is persistent: no more CTAs than
// fit on the device at once, CTA b taking groups b, b + grid, ...; so x' is staged once per
// CTA, not once per group, and a warp's weight stream runs on from one group into the next.
// (One CTA per group, as this kernel was until session 21, left a 25-100 MB product of
// Qwen3-8B at TP=2 at 34-62% of the copy rate: every CTA paid the prologue and a round trip
// before its single batch of loads, in 1.5-6 waves.) Otherwise one CTA per group.
//
// Weights go through lane-private shared-memory slots by cp.async: a ring of R (1 or 2)
// batches of kBatch 16-byte copies per lane, the next batch in flight while one is multiplied
// (register loads ended up interleaved with the mmas in gemv.cu's first version). The first R
// batches are issued before pdl_wait().
//
// Prologue: every CTA stages x' for all T rows in shared memory (T x K bf16 from L2; rows
// padded by 64 bytes so that the 8 rows a warp reads fall in different banks), computing
// the RMSNorm scale per row (one warp per row) or SiLU(gate) * up on the way.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

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
constexpr int kMaxWarps = 16;
constexpr int kRowPad = 32;    // bf16 of padding per staged row (64 bytes)
constexpr size_t kMaxStagedBytes = 64 * 1024;
// Batches of w a warp has in flight (the ring's depth R): 1 where each warp has a single
// batch in all (the CTAs of one round, each one group of one batch per warp), else 2: the one
// it multiplies and the next, so that its stream does not stop at a batch's or a group's end.
// Shared memory per thread: its R ring slots and its partial accumulators.
constexpr size_t slot_bytes(int ring) { return (ring * kBatch + 1) * sizeof(uint4); }
// Single-batch calls over several rounds of CTAs go persistent only from this K up. H200,
// session 21: Qwen3-0.6B's LM head (K 1024, 4,748 groups) cost single stream 1% persistent
// (0.778 against 0.771 ms a token); Qwen3-8B's products at K 2048-4096 took 20-47% less
// (cuda_ops_bench gemv-8b).
constexpr int kPersistentMinK = 2048;


// Writes x' for rows [0, t) into xs (row stride k + kRowPad). kRmsNorm: norm_w is the
// shared-memory copy that copy_norm_weights() started (the group before R others).
template <GemvPrologue P, int R>
__device__ void stage_input(const bf16* x, const bf16* norm_w, float eps, int t,
                            int k, bf16* xs, float* inv) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int vecs = k / 8;
  if constexpr (P == GemvPrologue::kRmsNorm) {
    // This thread's norm-weight copies (the group before the R batches of w); the barrier
    // below publishes them.
    cp_async_wait<R>();
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

template <GemvPrologue P, bool kAdd, typename OutT, int R>
__global__ void __launch_bounds__(kMaxWarps * 32)
    fused_gemv_kernel(const bf16* x, const bf16* __restrict__ w, const bf16* __restrict__ bias,
                      const bf16* __restrict__ norm_w, float eps, OutT* out, int t, int n, int k,
                      int warps_per_tile, int steps_per_warp, int groups) {
  extern __shared__ uint4 smem[];
  // [x' staged: t rows] [w ring: R x kBatch x 32 lanes x 16 B per warp] [partials]
  // [1 / rms] [norm weights: k, kRmsNorm only]
  bf16* xs = reinterpret_cast<bf16*>(smem);
  uint4* w_stage = reinterpret_cast<uint4*>(xs + size_t(t) * (k + kRowPad));
  float4* partial = reinterpret_cast<float4*>(w_stage + blockDim.x * R * kBatch);
  float* inv = reinterpret_cast<float*>(partial + blockDim.x);
  bf16* norm_s = reinterpret_cast<bf16*>(inv + kFusedGemvMaxTokens);

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, q = lane % 4;
  const int tiles_per_cta = blockDim.x / 32 / warps_per_tile;
  const int part = warp % warps_per_tile;
  const int steps = (k + kStepK - 1) / kStepK;
  const int s_begin = part * steps_per_warp;
  const int s_end = min(steps, s_begin + steps_per_warp);
  // This warp's batches: `batches` per group, groups blockIdx.x, + gridDim.x, ... (the CTA is
  // persistent: the staged x' serves all of its groups).
  const int batches = s_end > s_begin ? (s_end - s_begin + kBatch - 1) / kBatch : 0;
  const int my_groups = blockIdx.x < groups ? (groups - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const int total = my_groups * batches;
  auto tile_of = [&](int i) { return (blockIdx.x + i * gridDim.x) * tiles_per_cta + warp / warps_per_tile; };
  // Lane-private slots: each lane reads back only what it copied, so no barrier is needed.
  uint4* mine = w_stage + size_t(warp) * R * kBatch * 32 + lane;
  const uint32_t mine_addr = static_cast<uint32_t>(__cvta_generic_to_shared(mine));
  // Batch j of the warp's sequence into ring slot j % R; a commit either way, so that the
  // group count stays one per batch (an empty group past the end).
  auto copy_batch = [&](int j) {
    if (j < total) {
      const int s = s_begin + (j % batches) * kBatch;
      // Columns past n read the last row of w: their outputs are never stored.
      const bf16* w_row = w + size_t(min(tile_of(j / batches) * kTileCols + g, n - 1)) * k + q * 8;
      const uint32_t dst = mine_addr + (j % R) * kBatch * 32 * 16;
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int kk = (s + u) * kStepK;  // w_row already points at the lane's 8 elements
        const bool in = s + u < s_end && kk + q * 8 < k;
        cp_async_16(dst + u * 32 * 16, w_row + (in ? kk : 0), in);
      }
    }
    cp_async_commit();
  };

  // The first R batches of w before waiting: no kernel of the step writes the weights.
  if constexpr (P == GemvPrologue::kRmsNorm) copy_norm_weights(norm_w, k, norm_s);
#pragma unroll
  for (int j = 0; j < R; ++j) copy_batch(j);
  pdl_wait();
  pdl_trigger();
  // kAdd: the residual this thread adds to, loaded at the group's start rather than at the
  // store, where its round trip to L2 (slow while the next kernel's weights stream in) ended
  // the kernel; the first group's before the prologue, under whose loads it then completes.
  float old[2] = {0.0f, 0.0f};
  auto load_old = [&](int tile) {
    if constexpr (kAdd) {
      if (part == 0 && g < t) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int nn = tile * kTileCols + 2 * q + e;
          if (nn < n) old[e] = __bfloat162float(out[size_t(g) * n + nn]);
        }
      }
    }
  };
  if (my_groups > 0) load_old(tile_of(0));
  stage_input<P, R>(x, norm_s, eps, t, k, xs, inv);

  const bf16* x_row = xs + size_t(min(g, t - 1)) * (k + kRowPad) + q * 8;
  int j = 0;  // batches consumed
  for (int i = 0; i < my_groups; ++i) {
    const int tile = tile_of(i);
    if (i > 0) load_old(tile);
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int b = 0; b < batches; ++b, ++j) {
      cp_async_wait<R - 1>();  // batch j has landed; the later ones may be in flight
      const int s = s_begin + b * kBatch;
      const uint4* slots = mine + (j % R) * kBatch * 32;
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (s + u >= s_end) break;  // the same for the whole warp
        const int kk = (s + u) * kStepK;
        const uint4 wv = slots[u * 32];
        const uint4 xa = kk + q * 8 < k ? *reinterpret_cast<const uint4*>(x_row + kk)
                                        : make_uint4(0, 0, 0, 0);
        mma_bf16(c, xa.x, 0u, xa.y, 0u, wv.x, wv.y);
        mma_bf16(c, xa.z, 0u, xa.w, 0u, wv.z, wv.w);
      }
      copy_batch(j + R);  // into the slot just read (the mmas above consumed it)
    }

    if (warps_per_tile > 1) {
      partial[threadIdx.x] = make_float4(c[0], c[1], c[2], c[3]);
      __syncthreads();
      if (part == 0) {
        for (int p = 1; p < warps_per_tile; ++p) {
          const float4 v = partial[threadIdx.x + p * 32];
          c[0] += v.x;
          c[1] += v.y;
        }
      }
      __syncthreads();  // the partials are read before the next group's are written
    }
    if (part != 0 || g >= t) continue;
    // Accumulator fragment: c[e] is (token g, column 2q + e).
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int nn = tile * kTileCols + 2 * q + e;
      if (nn >= n) continue;
      const float v = c[e] + (bias != nullptr ? __bfloat162float(bias[nn]) : 0.0f);
      OutT* o = out + size_t(g) * n + nn;
      if constexpr (kAdd) {
        *o = __float2bfloat16(old[e] + round_bf16(v));
      } else {
        store_out(v, o);
      }
    }
  }
  cp_async_wait<0>();  // no copy outlives the CTA (the last ones are empty groups anyway)
}

// The device's opt-in shared memory per block (227 KB on compute capability 9.0, 163 KB on 8.0).
size_t smem_per_block() {
  int device = 0, bytes = 0;
  KS_CUDA_CHECK(cudaGetDevice(&device));
  KS_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return static_cast<size_t>(bytes);
}

size_t staged_bytes(int64_t t, int64_t k) { return size_t(t) * size_t(k + kRowPad) * 2; }

// How many CTAs of `threads` threads and `smem` bytes fit on the device at once.
template <typename Kernel>
int resident_ctas(Kernel kernel, int threads, size_t smem, int sms) {
  int per_sm = 0;
  KS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  return std::max(1, per_sm) * std::max(sms, 1);
}

template <GemvPrologue P, bool kAdd, typename OutT>
void launch(const void* x, const void* w, const void* bias, const GemvFusion& f, void* out,
            int t, int n, int k, int sms, cudaStream_t stream) {
  const size_t norm_bytes = P == GemvPrologue::kRmsNorm ? size_t(k) * 2 : 0;
  const size_t fixed = staged_bytes(t, k) + kFusedGemvMaxTokens * sizeof(float) + norm_bytes;
  // Warps per CTA: kMaxWarps unless a ring of two and x' would not fit (x' and the norm
  // weights of the largest K: then 8).
  const size_t max_smem = smem_per_block();
  int max_warps = kMaxWarps;
  while (max_warps > 4 && fixed + size_t(max_warps) * 32 * slot_bytes(2) > max_smem) max_warps /= 2;
  const int steps = (k + kStepK - 1) / kStepK;
  int warps_per_tile = std::min(max_warps, (steps + kBatch - 1) / kBatch);
  const int steps_per_warp = (steps + warps_per_tile - 1) / warps_per_tile;
  warps_per_tile = (steps + steps_per_warp - 1) / steps_per_warp;  // no idle warps
  const int tiles = (n + kTileCols - 1) / kTileCols;
  // Several tiles per CTA only while the groups still cover every SM.
  const int tiles_per_cta =
      std::max(1, std::min(max_warps / warps_per_tile, tiles / std::max(sms, 1)));
  const int threads = tiles_per_cta * warps_per_tile * 32;
  const int groups = (tiles + tiles_per_cta - 1) / tiles_per_cta;
  // One round of one batch per warp: a CTA per group with a ring of one, the smallest
  // footprint, so that under PDL the CTAs can start while the previous kernel's still hold
  // their SMs. Otherwise persistent: no more CTAs than fit at once, each looping over its
  // groups, so that x' is staged once per CTA and every warp's weight stream runs on from
  // one group into the next. Except for single batches under kPersistentMinK, whose CTAs'
  // prologues are short enough that several of them per SM keep more bytes in flight.
  // (KESTREL_GEMV_PERSISTENT=0: always a CTA per group, for comparisons.)
  static const bool persistent = [] {
    const char* v = std::getenv("KESTREL_GEMV_PERSISTENT");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  auto* one = fused_gemv_kernel<P, kAdd, OutT, 1>;
  auto* two = fused_gemv_kernel<P, kAdd, OutT, 2>;
  const size_t smem1 = fixed + size_t(threads) * slot_bytes(1);
  const size_t smem2 = fixed + size_t(threads) * slot_bytes(2);
  allow_dynamic_smem<fused_gemv_kernel<P, kAdd, OutT, 1>>(static_cast<int>(max_smem));
  allow_dynamic_smem<fused_gemv_kernel<P, kAdd, OutT, 2>>(static_cast<int>(max_smem));
  auto go = [&](auto* kernel, int grid, size_t smem) {
    launch_pdl("fused_gemv_kernel", kernel, grid, threads, smem, stream,
               static_cast<const bf16*>(x), static_cast<const bf16*>(w),
               static_cast<const bf16*>(bias), static_cast<const bf16*>(f.norm_w), f.eps,
               static_cast<OutT*>(out), t, n, k, warps_per_tile, steps_per_warp, groups);
  };
  // The occupancy query (host time on every eager launch) last, where the rest leaves it open.
  const bool single_batch = steps_per_warp <= kBatch;
  if (!persistent ||
      (single_batch && (k < kPersistentMinK || groups <= resident_ctas(one, threads, smem1, sms)))) {
    go(one, groups, smem1);
  } else {
    go(two, std::min(groups, resident_ctas(two, threads, smem2, sms)), smem2);
  }
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
