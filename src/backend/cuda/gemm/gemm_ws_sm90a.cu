// Prompt-sized GEMM on wgmma (gemm_ws.h): out[T, N] = x[T, K] * w[N, K]^T, or its SwiGLU.
//
// Maths: x is the wgmma A operand (M = 64 tokens per warpgroup) and w the B operand (N = 256
// rows of w per instruction, m64n256k16), both K-major in shared memory with the 128-byte
// swizzle of wgmma.cuh: one 64-wide K block is one 128-byte line per row. An output tile is
// 128 tokens x 256 rows of w; for kSiluMul those rows are 128 of the gate and the same 128 of
// the up projection (two TMA boxes), so every thread holds each gate value it needs next to
// its up value (accumulator columns j and j + 128) and the activation is computed in registers.
//
// Schedule: one CTA per SM (persistent), tiles blockIdx.x, + gridDim.x, ... (w's tiles
// fastest, so the CTAs working at once share x's rows and read w from L2). Three warpgroups:
// - warpgroup 0 runs on 40 registers (setmaxnreg). Its thread 0 copies: per K block, x's
//   128 x 64 box and w's two 128 x 64 boxes into a 3-stage ring (48 KB a stage), completing on
//   the stage's full mbarrier; it waits on the stage's empty barrier before reuse. The ring's
//   stages and parities run on across tiles, so the next tile's first blocks load while the
//   computing warpgroups finish the last one. Its warps 1-3 are the epilogue (below).
// - warpgroups 1 and 2 (232 registers) own 64 tokens each: per K block, four m64n256k16
//   wgmmas into 128 fp32 accumulators per thread, one group kept in flight (wait<1>), the
//   stage before it released. At a tile's end a warpgroup rounds its products to bf16 into
//   its own staging tile in shared memory (128-byte swizzle, as the output's TMA map reads
//   it), signals it staged, and goes on to its next tile at once.
// - The epilogue warps take each staged tile: for kSiluMul they compute the activation from
//   the bf16 gate and up values in place (over the gate half); then one of them stores the
//   tile by TMA, waits until the copy has read it and signals it drained. (For the qkv
//   product's RoPE epilogue, gemm_ws_rope.cuh, they store q and K/V themselves; that variant
//   runs warpgroup 0 on 104 registers and the computing ones on 200.) So the activation's
//   maths and the stores run under the next tile's products. (Stores straight from the
//   accumulators, 8 rows per warp instruction, cost ~5 us a tile on the H200, a third of a
//   1,024-deep tile's products; the activation computed there by the computing warpgroups
//   cost another ~4 us a tile.)
// Rows past T come in as zeros (the map's bounds) and the TMA store drops them; a last K
// block past k comes in as zeros too.
//
// PDL (launch.cuh): every thread waits before its first access (the producer's first copy of
// x, the consumers' first store); the weights' first stages are not issued early here: a
// prompt step's products are long enough that the launch overlap matters little.
#include <cuda.h>
#include <cuda_bf16.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/gemm/gemm_ws.h"
#include "backend/cuda/gemm/gemm_ws_rope.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/tma.cuh"
#include "backend/cuda/tma_map.h"
#include "backend/cuda/warpgroup_sync.cuh"
#include "backend/cuda/wgmma.cuh"

namespace kestrel::kernels {
namespace {

constexpr int kRows = kGemmWsTileRows;  // tokens per tile
constexpr int kCols = kGemmWsTileCols;  // rows of w per tile
constexpr int kStepK = 64;
constexpr int kStages = 3;
constexpr int kThreads = 384;
constexpr GemmWsEpilogue kRope = GemmWsEpilogue::kQkNormRopeStore;
// Registers of warpgroup 0 (producer and epilogue) and of each computing warpgroup:
// 128 p + 256 c <= 168 x 384, the launch's pool. The RoPE epilogue holds four tokens' values,
// cos and sin at a time (gemm_ws_rope.cuh): 104 / 200 (88 / 208 and 96 / 200 spilled).
template <GemmWsEpilogue E>
constexpr int kProducerRegs = E == kRope ? 104 : 40;
template <GemmWsEpilogue E>
constexpr int kConsumerRegs = E == kRope ? 200 : 232;

constexpr int kBarEpilogue = 1;  // named barrier of the epilogue warps
constexpr int kEpilogueThreads = 96;  // warpgroup 0's warps 1-3

// Each consumer's staging tile: 64 rows x 256 bf16 as four 64 x 64 panels of 8 KB.
constexpr uint32_t kPanel = 64 * 128;

template <GemmWsEpilogue E>
struct Layout {
  static constexpr uint32_t kX = kRows * 128;  // one stage's x box: 128 rows x 128 bytes
  static constexpr uint32_t kW = kCols * 128;  // w's two boxes
  static constexpr uint32_t kStage = kX + kW;
  static constexpr uint32_t kStaging = kStages * kStage;  // [2][kCols / 64 panels]
  // mbarriers: full[kStages], empty[kStages], staged[2], drained[2]
  static constexpr uint32_t kBars = kStaging + 2 * (kCols / 64) * kPanel;
  static constexpr uint32_t kRopeTable = kBars + 128;  // gemm_ws_rope.cuh's table (kRope)
  static constexpr uint32_t kBytes = kRopeTable + (E == kRope ? gemm_ws_epilogue::kRopeTableBytes : 0);
  static constexpr uint32_t kAlloc = kBytes + 1024;  // slack to align the base to 1 KB
  static_assert(kAlloc <= 227 * 1024, "shared memory per block");
};

// Rounds a consumer's 64 x 256 accumulators to bf16 into its staging panels.
// acc[4 j + 2 h + e]: row lane / 4 + 8 h of the warp's 16, column 8 j + 2 (lane % 4) + e;
// a warp's 4-byte stores hit 32 distinct banks (the swizzle spreads its 8 rows' chunks).
__device__ __forceinline__ void stage_tile(const float (&acc)[128], uint32_t staging) {
  const int lane = threadIdx.x % 32;
  const int row = (threadIdx.x % 128) / 32 * 16 + lane / 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = row + 8 * h;
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j) {
      const uint32_t v = pack_bf16(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      const uint32_t at = staging + (j / 8) * kPanel + r * 128 +
                          (((j % 8) ^ (r % 8)) << 4) + 4 * (lane % 4);
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(v) : "memory");
    }
  }
}

// The activation of a staged 64 x 256 tile of [gate | up] bf16 products, in place over the
// gate half: 16-byte chunk q (0..15) of row r holds gate columns 8q..8q+7, chunk q + 16 the
// up columns of the same outputs. Run by the epilogue warps, a chunk per thread at a time.
__device__ __forceinline__ void activate_tile(uint32_t staging, int tid) {
  for (int i = tid; i < 64 * 16; i += kEpilogueThreads) {
    const int r = i / 16, q = i % 16;
    const uint32_t g_at = staging + (q / 8) * kPanel + r * 128 + (((q % 8) ^ (r % 8)) << 4);
    const uint32_t u_at = g_at + 2 * kPanel;
    uint32_t g[4], u[4];
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(g[0]), "=r"(g[1]), "=r"(g[2]), "=r"(g[3]) : "r"(g_at) : "memory");
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(u[0]), "=r"(u[1]), "=r"(u[2]), "=r"(u[3]) : "r"(u_at) : "memory");
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 gf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&g[e]));
      const float2 uf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u[e]));
      g[e] = pack_bf16(silu_mul_f32(gf.x, uf.x), silu_mul_f32(gf.y, uf.y));
    }
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(g_at), "r"(g[0]), "r"(g[1]),
                 "r"(g[2]), "r"(g[3])
                 : "memory");
  }
}

template <GemmWsEpilogue E>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_ws_kernel(const __grid_constant__ CUtensorMap x_map,
                   const __grid_constant__ CUtensorMap w_map,
                   const __grid_constant__ CUtensorMap out_map, int t, int n, int k,
                   const __grid_constant__ QkNormRopeArgs rope) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace sm90;
  using L = Layout<E>;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + 1023) & ~1023u;
  const int tiles_n = n / kCols;
  const int tiles = (t + kRows - 1) / kRows * tiles_n;
  const int blocks = (k + kStepK - 1) / kStepK;
  auto full = [&](int s) { return base + L::kBars + 8 * s; };
  auto empty = [&](int s) { return base + L::kBars + 8 * (kStages + s); };
  auto staged = [&](int c) { return base + L::kBars + 8 * (2 * kStages + c); };
  auto drained = [&](int c) { return base + L::kBars + 8 * (2 * kStages + 2 + c); };
  auto staging_of = [&](int c) { return base + L::kStaging + c * (kCols / 64) * kPanel; };
  if (threadIdx.x == 0) {
    tma_prefetch_map(&x_map);
    tma_prefetch_map(&w_map);
    tma_prefetch_map(&out_map);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full(s), 1);    // the producer's expect_tx arrival (and the bytes)
      mbar_init(empty(s), 8);   // one arrival per consumer warp
    }
    for (int c = 0; c < 2; ++c) {
      mbar_init(staged(c), 4);   // one arrival per warp of consumer c
      mbar_init(drained(c), 1);  // the storing thread's, once the TMA store has read the tile
    }
    mbar_fence_init();
  }
  __syncthreads();
  pdl_wait();
  pdl_trigger();
  // Broadcast from lane 0 so that ptxas sees it warp-uniform: wgmma under a branch it thinks
  // divergent is serialised.
  const int warpgroup = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
  if (warpgroup == 0) {
    setmaxnreg_dec<kProducerRegs<E>>();
    if (threadIdx.x >= 32 && E == kRope) {  // the epilogue: qk_norm_rope_store
      const int tid = threadIdx.x - 32;
      const uint32_t table = base + L::kRopeTable;
      int done = 0;  // tiles so far
      for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, ++done) {
        const int h0 = tile % tiles_n * (kCols / gemm_ws_epilogue::kRopeD);
        const bool rope_heads = h0 < rope.num_q_heads + rope.num_kv_heads;
        for (int c = 0; c < 2; ++c) {
          const uint32_t staging = staging_of(c);
          const int row0 = tile / tiles_n * kRows + c * 64;
          named_barrier_sync(kBarEpilogue, kEpilogueThreads);  // the table's readers are done
          gemm_ws_epilogue::fill_rope_table<kEpilogueThreads>(rope, row0, rope_heads, table, tid,
                                                            kBarEpilogue);
          named_barrier_sync(kBarEpilogue, kEpilogueThreads);
          mbar_wait(staged(c), done & 1);
          if (rope.kv_head_major) {
            gemm_ws_epilogue::rope_store_tile<kEpilogueThreads / 32, true>(rope, staging, kPanel, table,
                                                                  row0, h0, tid / 32);
          } else {
            gemm_ws_epilogue::rope_store_tile<kEpilogueThreads / 32, false>(rope, staging, kPanel,
                                                                   table, row0, h0, tid / 32);
          }
          named_barrier_sync(kBarEpilogue, kEpilogueThreads);  // the staging tile is read
          if (tid == 0) mbar_arrive(drained(c));
        }
      }
      return;
    }
    if (threadIdx.x >= 32) {  // the epilogue: activation (kSiluMul) and TMA stores
      const int tid = threadIdx.x - 32;
      constexpr int kOutPanels = E == GemmWsEpilogue::kStore ? kCols / 64 : kCols / 128;
      int done = 0;  // tiles so far
      for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, ++done) {
        for (int c = 0; c < 2; ++c) {
          const uint32_t staging = staging_of(c);
          mbar_wait(staged(c), done & 1);
          if constexpr (E == GemmWsEpilogue::kSiluMul) activate_tile(staging, tid);
          fence_proxy_async_shared();  // the tile's writes, before the TMA unit reads them
          named_barrier_sync(kBarEpilogue, kEpilogueThreads);
          if (tid == 0) {
            const int row0 = tile / tiles_n * kRows + c * 64;
            const int col0 = tile % tiles_n * (kOutPanels * 64);
#pragma unroll
            for (int p = 0; p < kOutPanels; ++p) {
              tma_store_2d(&out_map, staging + p * kPanel, col0 + 64 * p, row0);
            }
            bulk_commit_group();
            bulk_wait_read<0>();
            mbar_arrive(drained(c));
          }
        }
      }
      if (tid == 0) bulk_wait<0>();  // the shared memory stays until the stores are done
      return;
    }
    if (threadIdx.x != 0) return;
    int it = 0;  // K blocks copied so far, over all of the CTA's tiles
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      const int row0 = tile / tiles_n * kRows, tile_n = tile % tiles_n;
      const bool silu = E == GemmWsEpilogue::kSiluMul;
      const int lo = silu ? tile_n * (kCols / 2) : tile_n * kCols;
      const int hi = silu ? n / 2 + lo : lo + kCols / 2;
      for (int b = 0; b < blocks; ++b, ++it) {
        const int s = it % kStages;
        mbar_wait(empty(s), ((it / kStages) & 1) ^ 1);  // a new barrier passes parity 1
        const uint32_t stage = base + s * L::kStage;
        mbar_expect_tx(full(s), L::kStage);  // boxes past the bounds count in full
        tma_load_2d(stage, &x_map, b * kStepK, row0, full(s));
        tma_load_2d(stage + L::kX, &w_map, b * kStepK, lo, full(s));
        tma_load_2d(stage + L::kX + L::kW / 2, &w_map, b * kStepK, hi, full(s));
      }
    }
    return;
  }
  setmaxnreg_inc<kConsumerRegs<E>>();
  const int c = warpgroup - 1;  // this warpgroup's 64 tokens of the tile
  const uint32_t staging = staging_of(c);
  auto release = [&](int s) {
    __syncwarp();
    if (threadIdx.x % 32 == 0) mbar_arrive(empty(s));
  };
  float acc[128];
  int it = 0, done = 0;  // K blocks and tiles so far
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, ++done) {
    for (int b = 0; b < blocks; ++b, ++it) {
      const int s = it % kStages;
      mbar_wait(full(s), (it / kStages) & 1);
      const uint32_t stage = base + s * L::kStage;
      wgmma_fence_operand(acc);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kStepK / 16; ++ks) {
        wgmma_m64n256k16_ss(acc, smem_desc(stage + c * 64 * 128 + 32 * ks, 16, 1024),
                            smem_desc(stage + L::kX + 32 * ks, 16, 1024), b > 0 || ks > 0);
      }
      wgmma_commit();
      wgmma_wait<1>();  // the previous block's products are done: its stage can refill
      if (b > 0) release((it - 1) % kStages);
    }
    wgmma_wait<0>();
    wgmma_fence_operand(acc);
    release((it - 1) % kStages);
    mbar_wait(drained(c), (done & 1) ^ 1);  // the last tile's store has read the staging tile
    stage_tile(acc, staging);
    fence_proxy_async_shared();  // for kStore the TMA unit reads these writes
    __syncwarp();
    if (threadIdx.x % 32 == 0) mbar_arrive(staged(c));
  }
#else
  __trap();  // compiled for sm_90a only; the callers never launch it elsewhere
#endif
}

template <GemmWsEpilogue E>
void launch(const void* x, const void* w, void* out, int t, int n, int k, int num_sms,
            const QkNormRopeArgs& rope, cudaStream_t stream) {
  constexpr int bytes = static_cast<int>(Layout<E>::kAlloc);
  allow_dynamic_smem<gemm_ws_kernel<E>>(bytes);
  const int64_t tiles = int64_t(t + kRows - 1) / kRows * (n / kCols);
  const auto grid = static_cast<unsigned>(std::min<int64_t>(tiles, std::max(num_sms, 1)));
  const CUtensorMap x_map = bf16_matrix_map(x, t, k, kRows);
  // kRope stores from registers: its out_map is never read (x's stands in).
  const CUtensorMap out_map =
      E == kRope ? x_map
                 : bf16_matrix_map(out, t, E == GemmWsEpilogue::kStore ? n : n / 2, 64);
  launch_pdl("gemm_ws_kernel", gemm_ws_kernel<E>, grid, kThreads, bytes, stream, x_map,
             bf16_matrix_map(w, n, k, kCols / 2), out_map, t, n, k, rope);
  KS_CUDA_CHECK_LAUNCH("gemm_ws_kernel");
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool gemm_ws_supported(int64_t t, int64_t n, int64_t k, const void* x, const void* w,
                       const void* out) {
  // int32 coordinates and tile counts: t x (n / 256) tiles fit easily below 2^31.
  return t >= 1 && t <= (int64_t(1) << 30) && n > 0 && n % kCols == 0 &&
         n <= (int64_t(1) << 24) && k > 0 && k % 8 == 0 && k <= (int64_t(1) << 24) &&
         aligned16(x) && aligned16(w) && aligned16(out);
}

void gemm_ws(const void* x, const void* w, void* out, int64_t t, int64_t n, int64_t k,
             GemmWsEpilogue epilogue, int num_sms, cudaStream_t stream) {
  KS_CUDA_CHECK(gemm_ws_supported(t, n, k, x, w, out) ? cudaSuccess : cudaErrorInvalidValue);
  const int ti = static_cast<int>(t), ni = static_cast<int>(n), ki = static_cast<int>(k);
  if (epilogue == GemmWsEpilogue::kStore) {
    launch<GemmWsEpilogue::kStore>(x, w, out, ti, ni, ki, num_sms, {}, stream);
  } else if (epilogue == GemmWsEpilogue::kSiluMul) {
    launch<GemmWsEpilogue::kSiluMul>(x, w, out, ti, ni, ki, num_sms, {}, stream);
  } else {
    KS_CUDA_CHECK(cudaErrorInvalidValue);  // kQkNormRopeStore comes through gemm_ws_rope
  }
}

bool gemm_ws_rope_supported(int64_t t, int64_t n, int64_t k, const void* x, const void* w,
                            const QkNormRopeArgs& rope) {
  const int hq = rope.num_q_heads, hkv = rope.num_kv_heads;
  return gemm_ws_supported(t, n, k, x, w, rope.q_out) && rope.head_dim == gemm_ws_epilogue::kRopeD &&
         hq > 0 && hkv > 0 && hq % 2 == 0 && hkv % 2 == 0 &&
         n == int64_t(hq + 2 * hkv) * gemm_ws_epilogue::kRopeD && !rope.kv.fp8 &&
         rope.num_tokens == t && rope.block_size > 0 && rope.max_pos > 0 &&
         rope.cos_sin_bf16 != nullptr && aligned16(rope.cos_sin_bf16) &&
         aligned16(rope.k_cache) && aligned16(rope.v_cache) &&
         (rope.q_norm == nullptr || aligned16(rope.q_norm)) &&
         (rope.k_norm == nullptr || aligned16(rope.k_norm));
}

void gemm_ws_rope(const void* x, const void* w, int64_t t, int64_t n, int64_t k,
                  const QkNormRopeArgs& rope, int num_sms, cudaStream_t stream) {
  KS_CUDA_CHECK(gemm_ws_rope_supported(t, n, k, x, w, rope) ? cudaSuccess
                                                              : cudaErrorInvalidValue);
  launch<kRope>(x, w, nullptr, static_cast<int>(t), static_cast<int>(n), static_cast<int>(k),
                num_sms, rope, stream);
}

}  // namespace kestrel::kernels
