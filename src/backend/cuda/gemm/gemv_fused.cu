// Fused small-batch products (gemv_fused.h): one product per kernel. The maths, the work
// split and the prologues are gemv_fused.cuh's.
#include <cuda_bf16.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm/gemv_fused.cuh"
#include "backend/cuda/gemm/gemv_fused.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace kestrel::kernels {
namespace {

using namespace gemv;

constexpr int kMaxWarpsPerTile = 16;

// A CTA holds tiles_per_cta tiles of warps_per_tile warps each.
template <GemvPrologue P, bool kAdd, typename OutT>
__global__ void __launch_bounds__(kMaxWarps * 32)
    fused_gemv_kernel(const bf16* x, const bf16* __restrict__ w, const bf16* __restrict__ bias,
                      const bf16* __restrict__ norm_w, float eps, OutT* out, int t, int n, int k,
                      int warps_per_tile, int steps_per_warp) {
  extern __shared__ uint4 smem[];
  const Smem sm = Smem::carve(smem, staged_bytes(t, k));
  const int warp = threadIdx.x / 32;
  const int tiles_per_cta = blockDim.x / 32 / warps_per_tile;
  const int part = warp % warps_per_tile;

  // The first batch of w before waiting: no kernel of the step writes the weights.
  if constexpr (P == GemvPrologue::kRmsNorm) copy_norm_weights(norm_w, k, sm.norm);
  const Share share(w, n, k, blockIdx.x * tiles_per_cta + warp / warps_per_tile, part,
                    steps_per_warp, sm.w_stage, warp);
  share.copy_batch(share.s_begin, k, true);
  pdl_wait();
  pdl_trigger();
  float old[2];
  load_old<kAdd, false>(out, share.tile, n, t, part == 0, old);
  stage_input<P, false>(x, sm.norm, eps, t, k, sm.xs, sm.inv);

  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  share.accumulate(sm.xs, t, k, c);
  if (warps_per_tile > 1) {
    add_parts(c, sm.partial, warps_per_tile, part);
    if (part != 0) return;  // no barrier follows
  }
  store_tile<kAdd>(c, old, bias, out, share.tile, n, t);
}

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
  const size_t smem = smem_bytes(staged_bytes(t, k), threads, norm_bytes);
  // x' and the norm weights each take at most kMaxStagedBytes (fused_gemv_supported).
  allow_dynamic_smem<fused_gemv_kernel<P, kAdd, OutT>>(static_cast<int>(smem_bytes(
      kMaxStagedBytes, kMaxWarps * 32, P == GemvPrologue::kRmsNorm ? kMaxStagedBytes : 0)));
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
