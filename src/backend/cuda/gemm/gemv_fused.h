// Fused small-batch products for decode at low batch: a GEMV (out[T, N] = x'[T, K] * w[N, K]^T
// with T <= kFusedGemvMaxTokens) whose input x' is computed from x on the way in and whose
// output can be added into the residual stream, so a decoder layer is four of these plus
// the attention kernels.
//
//   prologue kNone:     x' = x
//   prologue kRmsNorm:  x' = bf16(norm_w * bf16(x / rms(x)))          (as rms_norm)
//   prologue kSiluMul:  x' = bf16(bf16(silu(gate)) * up), x = [gate | up] of 2K columns
//                                                                     (as silu_mul)
//   add_to_out false:   out = round(x' w^T + bias)                    (bf16 or fp32 out)
//   add_to_out true:    out = bf16(out + bf16(x' w^T + bias))         (bf16 out, in place;
//                                                                      as linear then the
//                                                                      residual add)
//
// Bytes: w once, x once per CTA (from L2), out once. Every warp issues all the loads of its
// share of w before it waits for the previous kernel (launch.cuh: programmatic dependent
// launch), so under PDL the weight stream of this product overlaps the previous kernel.
// Host-side header; the launcher enqueues one kernel and can be captured into a CUDA graph.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kestrel::kernels {

constexpr int kFusedGemvMaxTokens = 8;

enum class GemvPrologue { kNone, kRmsNorm, kSiluMul };

struct GemvFusion {
  GemvPrologue prologue = GemvPrologue::kNone;
  const void* norm_w = nullptr;  // kRmsNorm: bf16 [k]
  float eps = 0.0f;              // kRmsNorm
  bool add_to_out = false;       // out is bf16 and is added into
};

// True when fused_gemv() takes the call: 1 <= t <= kFusedGemvMaxTokens, k a positive multiple
// of 8 whose staged input fits in shared memory (t x k x 2 bytes <= 64 KiB), x, w and norm_w
// 16-byte aligned. Otherwise the caller composes the unfused ops.
bool fused_gemv_supported(int64_t t, int64_t n, int64_t k, const void* x, const void* w,
                          const GemvFusion& fusion);

// x: bf16 [t, k] (kSiluMul: [t, 2k]); w: bf16 [n, k]; bias: bf16 [n] or null; out: [t, n],
// fp32 when f32_out (not with add_to_out), else bf16. Device pointers, row-major.
// REQUIRES: fused_gemv_supported(...). Launched with launch_pdl.
// `num_sms`: the device's multiprocessor count (the grid is sized from it).
void fused_gemv(const void* x, const void* w, const void* bias, void* out, bool f32_out,
                int64_t t, int64_t n, int64_t k, const GemvFusion& fusion, int num_sms,
                cudaStream_t stream);

}  // namespace kestrel::kernels
