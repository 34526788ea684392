// Prompt-sized GEMM on Hopper's warpgroup tensor cores, warp-specialised and persistent:
// out[T, N] = x[T, K] * w[N, K]^T, bf16 in and out, fp32 accumulation; or, with the SwiGLU
// epilogue, the MLP's activation straight from its gate_up product:
//   w = [gate; up] (2 I rows),  out[T, I] = bf16(bf16(silu(bf16(x gate^T))) * bf16(x up^T))
// rounded where HF's bf16 Qwen3MLP rounds (the gate_up product, act_fn, the product; the same
// points as activation.cu's silu_mul), so the [T, 2 I] product is never written or re-read.
//
// Why: a prompt step's gate_up product writes 2 I bf16 per token and silu_mul reads them back
// (the 8,192-token step: 150 MB a layer, ~8% of the step on an H100); fusing needs our own
// kernel at cuBLASLt's rate. Geometry and schedule: gemm_ws_sm90a.cu.
//
// Host-side header; the launcher enqueues one kernel and nothing else (graph-capturable).
// Built for sm_90a only: call it on compute capability 9.0 devices alone.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace kestrel::kernels {

enum class GemmWsEpilogue {
  kStore,    // out [T, N]
  kSiluMul,  // out [T, N / 2]: w's first N / 2 rows are the gate, the rest the up projection
  kQkNormRopeStore,  // gemm_ws_rope only
};

constexpr int kGemmWsTileRows = 128;  // tokens per tile
constexpr int kGemmWsTileCols = 256;  // rows of w per tile (kSiluMul: 128 gate + 128 up)

// True when gemm_ws() can run this call: t >= 1, n a positive multiple of kGemmWsTileCols,
// k a positive multiple of 8 (16-byte rows; the last K block is zero-filled), and x, w, out
// 16-byte aligned. (The device must be compute capability 9.0; that is the caller's check.)
bool gemm_ws_supported(int64_t t, int64_t n, int64_t k, const void* x, const void* w,
                       const void* out);

// x [t, k], w [n, k] bf16, out [t, n] (kStore) or [t, n / 2] (kSiluMul) bf16, device
// pointers, row-major. REQUIRES: gemm_ws_supported(...). One CTA per SM (num_sms of them at
// most) loops over the output tiles.
void gemm_ws(const void* x, const void* w, void* out, int64_t t, int64_t n, int64_t k,
             GemmWsEpilogue epilogue, int num_sms, cudaStream_t stream);

// The qkv product of a prompt step with qk_norm_rope_store (kernels.h) as its epilogue:
// w [(Hq + 2 Hkv) D, k]; the normed, rotated q heads go to rope.q_out, K and V into the cache
// at their slots, as the plain product followed by qk_norm_rope_store would write them (same
// bits); rope.qkv is not read. True when it can: gemm_ws_supported's conditions with
// rope.q_out as out, D = 128, Hq and Hkv even (a tile is two heads of one kind), a bf16
// cache, rope.cos_sin_bf16 given (the fp32 table is not read), rope.num_tokens == t and
// 16-byte aligned caches, bf16 cos/sin table and norm weights.
bool gemm_ws_rope_supported(int64_t t, int64_t n, int64_t k, const void* x, const void* w,
                            const QkNormRopeArgs& rope);
void gemm_ws_rope(const void* x, const void* w, int64_t t, int64_t n, int64_t k,
                  const QkNormRopeArgs& rope, int num_sms, cudaStream_t stream);

}  // namespace kestrel::kernels
