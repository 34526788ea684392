// Decode-step GEMM on Hopper's warpgroup tensor cores: out[T, N] = x[T, K] * w[N, K]^T, bf16
// in and out, fp32 accumulation, for the T of batched decode steps (a few dozen to 256 rows),
// where cuBLASLt's kernels take 5-9 us whatever the bytes. GemmRunner takes its 64-row plans
// for decode steps of up to 64 rows where wgmma_gemm_deep_preferred says; above that
// cuBLASLt is faster (docs/cuda_backend.md, "Decode-step GEMM on wgmma", has the
// measurements).
//
// Geometry (wgmma_gemm_sm90a.cu has the details): w's rows are the wgmma M dimension (a CTA
// owns 128 of them, two warpgroups of 64) and a tile of tokens the N dimension (64 or 128), so
// any T costs what its tiles cost; K is split over the CTAs of a thread-block cluster, which
// add their fp32 partial tiles through distributed shared memory in a fixed order (the result
// does not depend on timing: no atomics). A producer warp streams weights and x by TMA into a
// 3- or 4-stage ring for two consumer warpgroups; the first stages' weight loads are issued
// before the PDL wait.
//
// Host-side header (included by gemm.cc); the launcher enqueues one kernel and nothing else,
// so it can be captured into a CUDA graph. Built for sm_90a only: call it on compute
// capability 9.0 devices alone (GemmRunner checks).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kestrel::kernels {

constexpr int kWgmmaGemmMaxTokens = 256;
constexpr int kWgmmaGemmRows = 128;   // N per CTA
constexpr int kWgmmaGemmStepK = 64;   // K per pipeline stage
constexpr int kWgmmaGemmMaxSplit = 8; // cluster size: the portable maximum

// True when wgmma_gemm() can run this call: 1 <= t <= kWgmmaGemmMaxTokens, n a positive
// multiple of kWgmmaGemmRows, k a positive multiple of kWgmmaGemmStepK, and x, w, out 16-byte
// aligned. (The device must be compute capability 9.0; that is the caller's check.)
bool wgmma_gemm_supported(int64_t t, int64_t n, int64_t k, const void* x, const void* w,
                          const void* out);

// Where GemmRunner takes the 128-row plans under KESTREL_GEMM_SM90=1 (session 16's rule):
// products of at most 64 rows with at most 2048 outputs (o_proj and down_proj of a
// Qwen3-0.6B-sized layer), whose few output tiles leave cuBLASLt at ~20% of their bytes. On
// the H200 (docs/cuda_backend.md, "Decode-step GEMM on wgmma") the kernel alone is at par or
// up to 1.2 us ahead there, and behind on wider outputs and on 96+ rows.
bool wgmma_gemm_preferred(int64_t t, int64_t n, int64_t k);

// A launch's shape: the tile of tokens, the K split (1, 2, 4 or 8: the cluster size) and the
// rows of w per CTA: 128 (two warpgroups, two CTAs per SM, tiles of 64 or 128 tokens) or 64
// (one warpgroup with a ~192 KB ring, one CTA per SM, tiles of 32, 64 or 128 tokens).
struct WgmmaGemmPlan {
  int tile_tokens = 0;
  int split = 0;
  int rows = 0;  // 0: 128
};
// The 128-row plan the launcher uses for this shape on a device of num_sms multiprocessors.
WgmmaGemmPlan wgmma_gemm_plan(int64_t t, int64_t n, int64_t k, int num_sms);
// The 64-row plan: the smallest token tile that holds t (past 64 rows, 64-token tiles while
// they fit one wave), K split (up to four ways) while the CTAs stay within half the SMs, or,
// at t <= 32, within one wave where each CTA's K slice stays 1,536-6,144 deep (Qwen3-8B's
// products: session 25).
WgmmaGemmPlan wgmma_gemm_deep_plan(int64_t t, int64_t n, int64_t k, int num_sms);
// Where GemmRunner takes the 64-row plans (its default): products of at most 64 rows whose
// plan splits K on up to a wave as above, or keeps within half the SMs with at most 256 KiB
// of K slice per CTA, i.e.
// each CTA's whole slice in flight or nearly, as far as measured (H200, Qwen3-0.6B at T 16-32: qkv
// 4.16 against cuBLASLt's 5.35 us, o_proj 4.03 / 5.52, down 4.75 / 6.93; gate_up's 96
// tiles stay on cuBLASLt, at par there; docs/cuda_backend.md, "Decode-step GEMM on wgmma").
// Past 64 rows it says no: taking the one-wave 64-row plans up to 128 or 256 rows made
// nano-vLLM's bench and decode256 0.3-1.3% slower (H100, session 31: nano 20,899 -> 20,844
// and 20,634 output tok/s, decode256 34,620 -> 34,290 decode tok/s).
bool wgmma_gemm_deep_preferred(int64_t t, int64_t n, int64_t k, int num_sms);

// How many CTAs of this shape the current device holds at once
// (cudaOccupancyMaxActiveClusters x split): clusters must fit in one GPC.
int wgmma_gemm_resident_ctas(int tile_tokens, int split, int rows = 128);

// x [t, k], w [n, k], out [t, n], bf16, device pointers, row-major. REQUIRES:
// wgmma_gemm_supported(...). plan fields left 0 take wgmma_gemm_plan's (wgmma_gemm_deep_plan's
// where plan.rows is 64); explicit values are for benchmarks and tests (split must divide
// k / kWgmmaGemmStepK).
void wgmma_gemm(const void* x, const void* w, void* out, int64_t t, int64_t n, int64_t k,
                int num_sms, cudaStream_t stream, WgmmaGemmPlan plan = {});

}  // namespace kestrel::kernels
