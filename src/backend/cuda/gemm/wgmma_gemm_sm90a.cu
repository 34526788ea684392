// Decode-step GEMM on wgmma (wgmma_gemm.h): out[T, N] = x[T, K] * w[N, K]^T.
//
// Maths: out^T [N, T] = w [N, K] x^T: w is the wgmma A operand (M = 64 rows of w per
// warpgroup) and x the B operand (N = the CTA's tile of TN tokens), both K-major in shared
// memory with the 128-byte swizzle of wgmma.cuh, so one 64-wide K step is one 128-byte line
// per row. Token rows past T are zero-filled by the copy and never stored.
//
// Geometry: grid (split, token tiles, N / R), cluster (split, 1, 1) (none at split 1). A CTA
// owns R = 64 WG rows of w (WG consumer warpgroups) and TN tokens; CTA `rank` of a cluster
// sums K range [rank K / split, (rank + 1) K / split).
//
// Two shapes of CTA (the plan's `rows`): R = 128 (two warpgroups) with a ring of 3-4 stages,
// two CTAs per SM; or R = 64 (one warpgroup) with a deep ring of up to 16 stages (~192 KB),
// one CTA per SM, cuBLASLt's shape for these products (session 22's ncu: one CTA per SM,
// 13-15 stages, 48-64-row tiles): twice the CTAs for the same tile of tokens, so fewer need
// a K split, and every SM keeps ~192 KB of copies in flight either way.
//
// Schedule (warp-specialised): warps 0 .. 4 WG - 1 are the consumer warpgroups, the next the
// producer.
// The producer's lane 0 streams stages of w (128 x 64) and x (TN x 64) by TMA into a ring,
// each completing on the stage's full mbarrier; before refilling a stage it waits on the
// stage's empty mbarrier, which every consumer warp arrives on. Consumers: per stage 4 wgmma
// k16 steps, then the stage released at once (not after the next stage's products are issued:
// the weight stream is what bounds these shapes, and a stage released one step earlier is one
// more stage of copies in flight). This schedule took 10.0 us where the single-role version
// (thread 0 refilling the stage after a CTA barrier) took 12 us for o_proj at T = 16 with one
// CTA per tile (H200; docs/cuda_backend.md, "Decode-step GEMM on wgmma").
//
// Split-K without atomics: each CTA stages its fp32 partial tile [TN][128] in its own shared
// memory (the ring is free by then), the cluster synchronises, and CTA `rank` adds the
// partials of all the cluster's CTAs for token rows [rank TN / split, (rank + 1) TN / split),
// reading the others' tiles through distributed shared memory, its own first and then the
// next ranks' (so that the reads spread over the cluster); it rounds once to bf16 and stores
// 16-byte runs. Each output row has one owner and a fixed order of summands, so the result is
// the same on every run (and with split = 1 the partial is the sum). A second cluster barrier
// keeps every tile alive until the others have read it.
//
// Shared memory (R = 128): 96 KB of ring (4 stages at TN = 64, 3 at TN = 128), the stages'
// mbarriers and 1 KB of alignment slack: two CTAs per SM. The partial tile rows are R + 4
// floats apart, so the accumulator stores (lanes 4 apart write rows 2 tokens apart) hit 32
// distinct banks.
//
// PDL (launch.cuh): the first stages' weight copies are issued before pdl_wait(); x and out
// are touched only after it. The tensor maps (one per call, made on the host from the
// pointers and shapes) travel as __grid_constant__ parameters, so a captured graph keeps its
// own.
#include <cooperative_groups.h>
#include <cuda.h>
#include <cuda_bf16.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm/wgmma_gemm.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/tma.cuh"
#include "backend/cuda/tma_map.h"
#include "backend/cuda/warpgroup_sync.cuh"
#include "backend/cuda/wgmma.cuh"

namespace kestrel::kernels {
namespace {

namespace cg = cooperative_groups;

constexpr int kStepK = kWgmmaGemmStepK;
constexpr int kBarConsumers = 1;   // named barrier of the consumer warps
constexpr uint32_t kDeepRing = 192 << 10;  // R = 64: one CTA per SM

// R = 128: two CTAs per SM. (Two warpgroups with a 192 KB ring, 8 or 6 stages, measured 5-20%
// slower on the N = 1024 shapes and no faster elsewhere: docs/cuda_backend.md.)
template <int TN, int WG>
struct Layout {
  static constexpr int kRows = 64 * WG;          // rows of w per CTA
  static constexpr int kConsumerWarps = 4 * WG;
  static constexpr int kThreads = kConsumerWarps * 32 + 32;  // and the producer warp
  static constexpr int kCtasPerSm = WG == 2 ? 2 : 1;
  static constexpr int kStride = kRows + 4;      // floats per staged token row of the partial
  static constexpr uint32_t kW = kRows * 128;    // one stage's w tile: R rows x 128 bytes
  static constexpr uint32_t kX = TN * 128;
  static constexpr uint32_t kStage = kW + kX;
  static constexpr int kStages =
      WG == 2 ? (TN == 64 ? 4 : 3) : static_cast<int>(std::min<uint32_t>(16, kDeepRing / kStage));
  static constexpr uint32_t kRing = kStages * kStage;
  static constexpr uint32_t kPartial = TN * kStride * 4;
  // uint64 mbarriers full[kStages], empty[kStages]
  static constexpr uint32_t kBars = std::max(kRing, kPartial);
  static constexpr uint32_t kBytes = kBars + 2 * kStages * 8;
  static constexpr uint32_t kAlloc = kBytes + 1024;  // slack to align the base to 1 KB
};

template <int TN>
__device__ __forceinline__ void mma_k16(float (&d)[TN / 2], uint64_t a, uint64_t b, int scale_d) {
  if constexpr (TN == 32) {
    sm90::wgmma_m64n32k16_ss(d, a, b, scale_d);
  } else if constexpr (TN == 64) {
    sm90::wgmma_m64n64k16_ss(d, a, b, scale_d);
  } else {
    sm90::wgmma_m64n128k16_ss(d, a, b, scale_d);
  }
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

template <int TN, int WG>
__global__ void __launch_bounds__(Layout<TN, WG>::kThreads, Layout<TN, WG>::kCtasPerSm)
    wgmma_gemm_kernel(const __grid_constant__ CUtensorMap w_map,
                      const __grid_constant__ CUtensorMap x_map, __nv_bfloat16* __restrict__ out,
                      int t, int n, int k) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = Layout<TN, WG>;
  using namespace sm90;
  constexpr int kRows = L::kRows, kConsumerWarps = L::kConsumerWarps, kStride = L::kStride;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + 1023) & ~1023u;
  float* const partial = reinterpret_cast<float*>(smem_raw + (base - raw));

  cg::cluster_group cluster = cg::this_cluster();
  const int split = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int tid = threadIdx.x;
  const int tok0 = blockIdx.y * TN;
  const int row0 = blockIdx.z * kRows;
  const int k0 = rank * (k / split);
  const int steps = k / split / kStepK;

  auto full = [&](int s) { return base + L::kBars + 8 * s; };
  auto empty = [&](int s) { return base + L::kBars + 8 * (L::kStages + s); };
  auto stage = [&](int s) { return base + s * L::kStage; };
  if (tid == 0) {
    tma_prefetch_map(&w_map);
    tma_prefetch_map(&x_map);
    for (int s = 0; s < L::kStages; ++s) {
      mbar_init(full(s), 1);                  // the producer's expect_tx arrival (and the bytes)
      mbar_init(empty(s), kConsumerWarps);    // every consumer warp
    }
    mbar_fence_init();
  }
  __syncthreads();  // the barriers are initialised before anyone uses them

  if (tid >= kConsumerWarps * 32) {  // the producer warp
    if (tid == kConsumerWarps * 32) {
      auto load_w = [&](int i) {
        const int s = i % L::kStages;
        mbar_expect_tx(full(s), L::kStage);
        tma_load_2d(stage(s), &w_map, k0 + i * kStepK, row0, full(s));
      };
      auto load_x = [&](int i) {
        const int s = i % L::kStages;
        tma_load_2d(stage(s) + L::kW, &x_map, k0 + i * kStepK, tok0, full(s));
      };
      const int first = steps < L::kStages ? steps : L::kStages;
      for (int i = 0; i < first; ++i) load_w(i);  // weights only: before the wait
      pdl_wait();
      for (int i = 0; i < first; ++i) load_x(i);
      for (int i = first; i < steps; ++i) {
        // The (i / kStages)-th release of this stage.
        mbar_wait(empty(i % L::kStages), ((i / L::kStages) & 1) ^ 1);
        load_w(i);
        load_x(i);
      }
    }
    pdl_wait();
    pdl_trigger();
    if (split > 1) {  // the consumers' two cluster barriers
      cluster.sync();
      cluster.sync();
    }
    return;
  }
  pdl_wait();
  pdl_trigger();

  auto release = [&](int s) {
    __syncwarp();
    if (tid % 32 == 0) mbar_arrive(empty(s));
  };
  float acc[TN / 2];  // the first k16 step overwrites (scale_d 0): no zeroing in the pipeline
  const uint32_t a_rows = (tid / 128) * 64 * 128;  // this warpgroup's 64 rows of w
  for (int i = 0; i < steps; ++i) {
    const int s = i % L::kStages;
    mbar_wait(full(s), (i / L::kStages) & 1);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kStepK / 16; ++ks) {
      mma_k16<TN>(acc, smem_desc(stage(s) + a_rows + 32 * ks, 16, 1024),
                  smem_desc(stage(s) + L::kW + 32 * ks, 16, 1024), i > 0 || ks > 0);
    }
    wgmma_commit();
    // Released at once, not after the next stage's products are issued (wait<1>): the
    // weight stream is what bounds these shapes, and a stage released one step earlier is
    // one more stage of copies in flight.
    wgmma_wait<0>();
    release(s);
  }
  wgmma_fence_operand(acc);
  named_barrier_sync(kBarConsumers, kConsumerWarps * 32);  // the ring is read: it holds the tile

  // acc: this thread's rows (of w) lane / 4 and lane / 4 + 8 of its warp's 16, columns (tokens)
  // 8 j + 2 (lane % 4) + {0, 1}: acc[4 j + 2 h + c].
  {
    const int lane = tid % 32;
    const int row = (tid / 32) * 16 + lane / 4;
#pragma unroll
    for (int j = 0; j < TN / 8; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          partial[(8 * j + 2 * (lane % 4) + c) * kStride + row + 8 * h] = acc[4 * j + 2 * h + c];
        }
      }
    }
  }
  if (split > 1) {
    cluster.sync();
  } else {
    named_barrier_sync(kBarConsumers, kConsumerWarps * 32);
  }

  const int rows_per_rank = TN / split;
  constexpr int kChunks = kRows / 8;  // 8 outputs (16 bytes of bf16) per chunk
  for (int i = tid; i < rows_per_rank * kChunks; i += kConsumerWarps * 32) {
    const int r = rank * rows_per_rank + i / kChunks;
    const int c = (i % kChunks) * 8;
    if (tok0 + r >= t) continue;
    float v[8] = {};
    for (int j = 0; j < split; ++j) {
      // Each CTA starts with its own tile, so the cluster's reads spread over its SMs
      // instead of all starting at rank 0's.
      const int src = (rank + j) % split;
      const float* p = (split > 1 ? cluster.map_shared_rank(partial, src) : partial) +
                       r * kStride + c;
      const float4 lo = *reinterpret_cast<const float4*>(p);
      const float4 hi = *reinterpret_cast<const float4*>(p + 4);
      v[0] += lo.x, v[1] += lo.y, v[2] += lo.z, v[3] += lo.w;
      v[4] += hi.x, v[5] += hi.y, v[6] += hi.z, v[7] += hi.w;
    }
    const uint4 packed = {pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]),
                          pack_bf16x2(v[4], v[5]), pack_bf16x2(v[6], v[7])};
    *reinterpret_cast<uint4*>(out + int64_t(tok0 + r) * n + row0 + c) = packed;
  }
  if (split > 1) cluster.sync();  // every partial tile stays until the cluster has read it
#else
  __trap();  // compiled for sm_90a only; GemmRunner never launches it elsewhere
#endif
}

template <int TN, int WG>
void launch(const void* x, const void* w, void* out, int t, int n, int k, int split,
            cudaStream_t stream) {
  using L = Layout<TN, WG>;
  constexpr int bytes = static_cast<int>(L::kAlloc);
  allow_dynamic_smem<wgmma_gemm_kernel<TN, WG>>(bytes);
  const dim3 grid(split, (t + TN - 1) / TN, n / L::kRows);
  // Split 1 launches without a cluster: nothing is shared, and a cluster's CTAs must find
  // room in one GPC together.
  launch_pdl_cluster("wgmma_gemm_kernel", wgmma_gemm_kernel<TN, WG>, grid, L::kThreads, bytes,
                     split > 1 ? split : 0, stream, bf16_matrix_map(w, n, k, L::kRows),
                     bf16_matrix_map(x, t, k, TN), static_cast<__nv_bfloat16*>(out), t, n, k);
  KS_CUDA_CHECK_LAUNCH("wgmma_gemm_kernel");
}

template <int TN, int WG>
int resident_ctas(int split) {
  using L = Layout<TN, WG>;
  constexpr int bytes = static_cast<int>(L::kAlloc);
  allow_dynamic_smem<wgmma_gemm_kernel<TN, WG>>(bytes);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(split);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(split, 1, 1);
  config.blockDim = L::kThreads;
  config.dynamicSmemBytes = bytes;
  config.attrs = attr;
  config.numAttrs = 1;
  int clusters = 0;
  KS_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, wgmma_gemm_kernel<TN, WG>, &config));
  return clusters * split;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool wgmma_gemm_supported(int64_t t, int64_t n, int64_t k, const void* x, const void* w,
                          const void* out) {
  return t >= 1 && t <= kWgmmaGemmMaxTokens && n > 0 && n % kWgmmaGemmRows == 0 && k > 0 &&
         k % kStepK == 0 && n <= (int64_t(1) << 20) && k <= (int64_t(1) << 20) &&
         aligned16(x) && aligned16(w) && aligned16(out);
}

bool wgmma_gemm_preferred(int64_t t, int64_t n, int64_t k) { return t <= 64 && n <= 2048; }

WgmmaGemmPlan wgmma_gemm_plan(int64_t t, int64_t n, int64_t k, int num_sms) {
  WgmmaGemmPlan p;
  p.rows = kWgmmaGemmRows;
  p.tile_tokens = t <= 64 ? 64 : 128;
  const int64_t tiles = (n / p.rows) * ((t + p.tile_tokens - 1) / p.tile_tokens);
  const int64_t steps = k / kStepK;
  // Split K while the CTAs fit in one wave of two per SM and each keeps >= 2 stages.
  p.split = 1;
  while (p.split < kWgmmaGemmMaxSplit && steps % (2 * p.split) == 0 &&
         steps / (2 * p.split) >= 2 && tiles * 2 * p.split <= 2 * int64_t(num_sms)) {
    p.split *= 2;
  }
  return p;
}

namespace {

// Session 25's sweep (H200, Qwen3-8B's products at T = 16 and 32): with K slices of
// 1,536-6,144 a CTA, a split that fills up to a whole wave of SMs beat both the half-wave
// plan and cuBLASLt (TP=2 qkv 9.5 us against 12.1 unsplit and 10.4-11.3 on cuBLASLt; TP=2
// down 14.7 / 17.7 / 16.6-17.0; TP=4 down 9.5 / 10.5 / 10.2-10.7; TP=1 o_proj 10.9 / - /
// 12.1-12.8; TP=1 down 26.4 / 32.2 / 27.6-28.5), where shorter slices at a whole wave lost
// (TP=2 o_proj, 1,024: 8.1-8.3 against cuBLASLt's 6.8-6.9; Qwen3-0.6B's qkv, 512: 5.5
// against 4.0 unsplit). Longer slices were not measured.
constexpr int64_t kWaveSliceMin = 1536, kWaveSliceMax = 6144;

bool wave_split_fits(int64_t t, int64_t tiles, int64_t k, int split, int num_sms) {
  const int64_t slice = k / split;
  return t <= 32 && split >= 2 && tiles * split <= num_sms && slice >= kWaveSliceMin &&
         slice <= kWaveSliceMax;
}

}  // namespace

WgmmaGemmPlan wgmma_gemm_deep_plan(int64_t t, int64_t n, int64_t k, int num_sms) {
  // The smallest token tile that holds t (up to 128), and K split in two, then four, while
  // the CTAs stay within half the SMs: session 24's sweep (H200, Qwen3-0.6B's products) had
  // the fastest plan at T <= 64 use 64-66 CTAs, each with its whole K slice in flight, and
  // splits of 8 or CTAs past one per two SMs slower (qkv at T = 16: 4.16 us on 64 CTAs, 5.60
  // split in two on 128; o_proj: 4.03 split in four on 64, 7.83 in eight). At T <= 32, K
  // slices of 1,536-6,144 split on up to a whole wave (wave_split_fits). Past 64 rows, tiles
  // of 64 tokens while they fit one wave: session 30's H100 sweep at T = 128 had them ahead
  // of 128-token tiles on every Qwen3-0.6B product that fits (qkv 6.91 against 7.37 us,
  // o_proj 6.04 / 6.70, down 7.75 / 7.94).
  WgmmaGemmPlan p;
  p.rows = 64;
  const int64_t tiles64 = (n / p.rows) * ((t + 63) / 64);
  p.tile_tokens = t <= 32 ? 32 : t <= 64 || tiles64 <= num_sms ? 64 : 128;
  const int64_t tiles = (n / p.rows) * ((t + p.tile_tokens - 1) / p.tile_tokens);
  const int64_t steps = k / kStepK;
  p.split = 1;
  while (p.split < 4 && steps % (2 * p.split) == 0 && steps / (2 * p.split) >= 2 &&
         (tiles * 2 * p.split <= num_sms / 2 ||
          wave_split_fits(t, tiles, k, 2 * p.split, num_sms))) {
    p.split *= 2;
  }
  return p;
}

bool wgmma_gemm_deep_preferred(int64_t t, int64_t n, int64_t k, int num_sms) {
  // The K slice a CTA streams (w's and x's rows): at most the largest that session 24's
  // sweep measured at par or ahead of cuBLASLt (qkv at T = 64: 256 KiB, a ring and a third);
  // or a plan split on up to a whole wave (wave_split_fits).
  constexpr int64_t kMaxSliceBytes = int64_t{256} << 10;
  if (t > 64) return false;
  const WgmmaGemmPlan p = wgmma_gemm_deep_plan(t, n, k, num_sms);
  const int64_t tiles = (n / p.rows) * ((t + p.tile_tokens - 1) / p.tile_tokens);
  const int64_t slice_bytes = k / p.split * 2 * (p.rows + p.tile_tokens);
  return (tiles * p.split <= num_sms / 2 && slice_bytes <= kMaxSliceBytes) ||
         wave_split_fits(t, tiles, k, p.split, num_sms);
}

int wgmma_gemm_resident_ctas(int tile_tokens, int split, int rows) {
  if (rows == 64) {
    return tile_tokens == 32   ? resident_ctas<32, 1>(split)
           : tile_tokens == 64 ? resident_ctas<64, 1>(split)
                               : resident_ctas<128, 1>(split);
  }
  return tile_tokens == 64 ? resident_ctas<64, 2>(split) : resident_ctas<128, 2>(split);
}

void wgmma_gemm(const void* x, const void* w, void* out, int64_t t, int64_t n, int64_t k,
                int num_sms, cudaStream_t stream, WgmmaGemmPlan plan) {
  if (plan.rows == 0) plan.rows = kWgmmaGemmRows;
  const WgmmaGemmPlan def = plan.rows == 64 ? wgmma_gemm_deep_plan(t, n, k, num_sms)
                                            : wgmma_gemm_plan(t, n, k, num_sms);
  if (plan.tile_tokens == 0) plan.tile_tokens = def.tile_tokens;
  if (plan.split == 0) plan.split = def.split;
  const bool ok_split = plan.split >= 1 && plan.split <= kWgmmaGemmMaxSplit &&
                        (plan.split & (plan.split - 1)) == 0 &&
                        (k / kStepK) % plan.split == 0;
  const bool ok_tile = plan.rows == 64 ? (plan.tile_tokens == 32 || plan.tile_tokens == 64 ||
                                          plan.tile_tokens == 128)
                                       : plan.rows == 128 && (plan.tile_tokens == 64 ||
                                                              plan.tile_tokens == 128);
  if (!ok_split || !ok_tile) KS_CUDA_CHECK(cudaErrorInvalidValue);
  const int ti = static_cast<int>(t), ni = static_cast<int>(n), ki = static_cast<int>(k);
  const int sp = plan.split;
  if (plan.rows == 64) {
    if (plan.tile_tokens == 32) {
      launch<32, 1>(x, w, out, ti, ni, ki, sp, stream);
    } else if (plan.tile_tokens == 64) {
      launch<64, 1>(x, w, out, ti, ni, ki, sp, stream);
    } else {
      launch<128, 1>(x, w, out, ti, ni, ki, sp, stream);
    }
  } else if (plan.tile_tokens == 64) {
    launch<64, 2>(x, w, out, ti, ni, ki, sp, stream);
  } else {
    launch<128, 2>(x, w, out, ti, ni, ki, sp, stream);
  }
}

}  // namespace kestrel::kernels
