// Small-batch GEMM ("GEMV") for decode steps: out[T, N] = x[T, K] * w[N, K]^T (+ bias[N]),
// bf16 x and w, fp32 accumulation, bf16 or fp32 output, for 1 <= T <= kGemvMaxTokens.
//
// At such T the GEMM is bound by reading w once; cuBLASLt's kernels reach about half the
// copy rate there. This kernel streams w with 16-byte loads and multiplies on tensor cores
// (mma.sync m16n8k16 with x as the 16-row operand, so any T <= 16 costs the same), splitting
// K over the warps of a CTA when N alone cannot fill the GPU. See gemv.cu for the layout.
//
// Host-side header (included by gemm.cc); the launcher enqueues one kernel and nothing else,
// so it can be captured into a CUDA graph.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kestrel::kernels {

// Largest T the kernel takes (one m16 tile of tokens).
constexpr int kGemvMaxTokens = 16;

// True when gemv() can run this call: 1 <= t <= kGemvMaxTokens, k a positive multiple of 8,
// n >= 1, and x and w 16-byte aligned (rows are then 16-byte aligned too). Otherwise the
// caller uses cuBLASLt.
bool gemv_supported(int64_t t, int64_t n, int64_t k, const void* x, const void* w);

// How many warps share one 8-column tile's K range (1, 2, 4, 8 or 16; at most 8 for t > 8):
// enough that each warp issues all its loads at once (one batch of 8 K steps), fewer when
// the tiles alone make several waves of warps.
int gemv_k_split(int64_t t, int64_t n, int64_t k, int num_sms);

// x [t, k] bf16, w [n, k] bf16, bias [n] bf16 or null, out [t, n] (fp32 when f32_out, else
// bf16), device pointers, row-major. REQUIRES: gemv_supported(t, n, k, x, w). The bias is
// added in fp32 before the output is rounded. `k_split` 0 (or anything but a power of two
// <= 16) picks gemv_k_split(t, n, k, num_sms); explicit values are for benchmarks.
void gemv(const void* x, const void* w, const void* bias, void* out, bool f32_out, int64_t t,
          int64_t n, int64_t k, int num_sms, cudaStream_t stream, int k_split = 0);

// One thread that spins for `ns` nanoseconds: GemmRunner enqueues it before timing candidate
// cuBLASLt algorithms, so the timed calls queue up behind it and run back to back instead of
// at the host's launch rate.
void spin_for(int64_t ns, cudaStream_t stream);

}  // namespace kestrel::kernels
