// The layer-tail chain of fused products (gemv_chain.h).
//
// Geometry: G CTAs (one per SM) of kMaxWarps warps. In product p a tile (8 output columns)
// takes warps_per_tile warps, so a CTA has kMaxWarps / warps_per_tile slots; tile i goes to
// CTA i % G, slot i / G (modulo the slots of a pass), so that every SM gets work before any
// SM gets a second tile, and a product with more tiles than G x slots runs in passes. The
// host picks warps_per_tile per product for the fewest sequential batches of weight loads
// per warp (passes x batches per share), ties to more warps per tile (more bytes in flight).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm/gemv_chain.h"
#include "backend/cuda/gemm/gemv_fused.cuh"
#include "backend/cuda/grid_sync.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace kestrel::kernels {
namespace {

using namespace gemv;

struct Product {
  const bf16* x;
  const bf16* w;
  const bf16* bias;
  const bf16* norm_w;
  bf16* out;
  int n, k;
  int warps_per_tile, steps_per_warp;

  __device__ int tiles() const { return (n + kTileCols - 1) / kTileCols; }
  __device__ int slots() const { return kMaxWarps / warps_per_tile; }
  __device__ int passes() const {
    const int per_pass = slots() * int(gridDim.x);
    return (tiles() + per_pass - 1) / per_pass;
  }
  // This warp's share in pass `pass`; *active is false for a slot past the last tile.
  __device__ Share share(int pass, const Smem& sm, bool* active) const {
    const int warp = threadIdx.x / 32;
    const int tile = (pass * slots() + warp / warps_per_tile) * int(gridDim.x) + int(blockIdx.x);
    *active = tile < tiles();
    return Share(w, n, k, tile, warp % warps_per_tile, steps_per_warp, sm.w_stage, warp);
  }
};

struct ChainArgs {
  Product p[4];
  int num_products;
  int t;
  float eps;
  unsigned* counter;
  unsigned staged;  // bytes of the staged-input region (the largest product's)
  int debug;
};

// EXPERIMENT: bit 0 skips the barriers (wrong results, timing only), bit 1 polls relaxed.
__device__ void chain_sync(const ChainArgs& a) {
  if (a.debug & 1) { __syncthreads(); return; }
  if (!(a.debug & 2)) return grid_sync(a.counter);
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned add = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u;
    __threadfence();
    const unsigned seen = atomicAdd(a.counter, add);
    unsigned now;
    do {
      asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(a.counter) : "memory");
    } while (((seen ^ now) & 0x80000000u) == 0);
    __threadfence();
  }
  __syncthreads();
}

// The norm weights and the first batch of the product's first pass: before the wait for what
// the previous product (or kernel) writes, since nothing writes them.
template <GemvPrologue P>
__device__ void prefetch(const Product& p, const Smem& sm) {
  if constexpr (P == GemvPrologue::kRmsNorm) copy_norm_weights(p.norm_w, p.k, sm.norm);
  bool active;
  const Share share = p.share(0, sm, &active);
  share.copy_batch(share.s_begin, p.k, active);
}

// One product, after its prefetch() and the barrier. Its input and the residual it adds to
// were written by other CTAs of this grid: loaded through L2 (gemv_fused.cuh, load8).
template <GemvPrologue P, bool kAdd>
__device__ void run(const Product& p, const Smem& sm, int t, float eps) {
  stage_input<P, true>(p.x, sm.norm, eps, t, p.k, sm.xs, sm.inv);
  const int part = threadIdx.x / 32 % p.warps_per_tile;
  const int passes = p.passes();
  for (int pass = 0; pass < passes; ++pass) {
    bool active;
    const Share share = p.share(pass, sm, &active);
    if (pass > 0) share.copy_batch(share.s_begin, p.k, active);
    float old[2];
    load_old<kAdd, true>(p.out, share.tile, p.n, t, active && part == 0, old);
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (active) share.accumulate(sm.xs, t, p.k, c);
    add_parts(c, sm.partial, p.warps_per_tile, part);
    if (active && part == 0) store_tile<kAdd>(c, old, p.bias, p.out, share.tile, p.n, t);
    __syncthreads();  // the partials are rewritten by the next pass or product
  }
}

__global__ void __launch_bounds__(kMaxWarps * 32, 1) gemv_chain_kernel(ChainArgs a) {
  extern __shared__ uint4 smem[];
  const Smem sm = Smem::carve(smem, a.staged);
  prefetch<GemvPrologue::kNone>(a.p[0], sm);
  pdl_wait();
  run<GemvPrologue::kNone, true>(a.p[0], sm, a.t, a.eps);
  prefetch<GemvPrologue::kRmsNorm>(a.p[1], sm);
  chain_sync(a);
  run<GemvPrologue::kRmsNorm, false>(a.p[1], sm, a.t, a.eps);
  prefetch<GemvPrologue::kSiluMul>(a.p[2], sm);
  chain_sync(a);
  if (a.num_products == 3) pdl_trigger();  // every CTA is past its last barrier
  run<GemvPrologue::kSiluMul, true>(a.p[2], sm, a.t, a.eps);
  if (a.num_products == 4) {
    prefetch<GemvPrologue::kRmsNorm>(a.p[3], sm);
    chain_sync(a);
    pdl_trigger();
    run<GemvPrologue::kRmsNorm, false>(a.p[3], sm, a.t, a.eps);
  }
}

constexpr int kThreads = kMaxWarps * 32;

// The staged-input and norm-weight regions: the largest of the products'.
size_t staged_room(const GemvChain& c) {
  size_t room = 0;
  for (int i = 0; i < c.num_products; ++i) room = std::max(room, staged_bytes(c.t, c.p[i].k));
  return room;
}

size_t norm_room(const GemvChain& c) {
  size_t room = size_t(c.p[1].k) * 2;
  if (c.num_products == 4) room = std::max(room, size_t(c.p[3].k) * 2);
  return room;
}

size_t chain_smem(const GemvChain& c) {
  return smem_bytes(staged_room(c), kThreads, norm_room(c));
}

// Fewest sequential weight batches per warp (passes x batches of a share); ties go to more
// warps per tile, as the loop tries those first.
void plan(const GemvChainProduct& in, int grid, Product& p) {
  const int steps = static_cast<int>((in.k + kStepK - 1) / kStepK);
  const int64_t tiles = (in.n + kTileCols - 1) / kTileCols;
  int64_t best = -1;
  for (int wpt = kMaxWarps; wpt >= 1; wpt /= 2) {
    const int spw = (steps + wpt - 1) / wpt;
    const int64_t per_pass = int64_t(grid) * (kMaxWarps / wpt);
    const int64_t cost = (tiles + per_pass - 1) / per_pass * ((spw + kBatch - 1) / kBatch);
    if (best < 0 || cost < best) {
      best = cost;
      p.warps_per_tile = wpt;
      p.steps_per_warp = spw;
    }
  }
  p.x = static_cast<const bf16*>(in.x);
  p.w = static_cast<const bf16*>(in.w);
  p.bias = static_cast<const bf16*>(in.bias);
  p.norm_w = static_cast<const bf16*>(in.norm_w);
  p.out = static_cast<bf16*>(in.out);
  p.n = static_cast<int>(in.n);
  p.k = static_cast<int>(in.k);
}

int max_smem_per_block() {
  int device = 0, bytes = 0;
  KS_CUDA_CHECK(cudaGetDevice(&device));
  KS_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return bytes;
}

}  // namespace

bool gemv_chain_supported(const GemvChain& c) {
  if (c.num_products != 3 && c.num_products != 4) return false;
  if (c.t < 1 || c.t > kFusedGemvMaxTokens) return false;
  for (int i = 0; i < c.num_products; ++i) {
    GemvFusion f;
    f.prologue = i == 1 || i == 3 ? GemvPrologue::kRmsNorm
                                  : (i == 2 ? GemvPrologue::kSiluMul : GemvPrologue::kNone);
    f.norm_w = c.p[i].norm_w;
    const GemvChainProduct& p = c.p[i];
    if (p.out == nullptr || !fused_gemv_supported(c.t, p.n, p.k, p.x, p.w, f)) return false;
  }
  static const int limit = max_smem_per_block();
  const size_t smem = chain_smem(c);
  if (smem > static_cast<size_t>(limit)) return false;
  allow_dynamic_smem<gemv_chain_kernel>(limit);
  int per_sm = 0;
  KS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemv_chain_kernel, kThreads,
                                                              smem));
  return per_sm >= 1;
}

void gemv_chain(const GemvChain& c, unsigned* counter, int num_sms, cudaStream_t stream) {
  const size_t smem = chain_smem(c);
  const int grid = std::max(num_sms, 1);  // one CTA per SM: all resident (gemv_chain.h)
  ChainArgs a{};
  for (int i = 0; i < c.num_products; ++i) plan(c.p[i], grid, a.p[i]);
  a.num_products = c.num_products;
  a.t = static_cast<int>(c.t);
  a.eps = c.eps;
  a.counter = counter;
  a.staged = static_cast<unsigned>(staged_room(c));
  static const int debug = std::getenv("KESTREL_CHAIN_DEBUG") ? std::atoi(std::getenv("KESTREL_CHAIN_DEBUG")) : 0;
  a.debug = debug;
  launch_pdl("gemv_chain_kernel", gemv_chain_kernel, grid, kThreads, smem, stream, a);
}

}  // namespace kestrel::kernels
