// The fused small-batch products between two attentions of a decode step (Backend::
// layer_tail), as one persistent kernel:
//
//   product 0: residual = bf16(residual + bf16(attn o_proj^T + o_bias))      (linear_add)
//   product 1: gate_up = bf16(rms_norm(residual, post_norm) gate_up_w^T)     (norm_linear)
//   product 2: residual = bf16(residual + bf16(silu_mul(gate_up) down^T))    (silu_mul_linear_add)
//   product 3: qkv = bf16(rms_norm(residual, next_norm) next_qkv^T + bias)  (norm_linear; optional)
//
// with the maths, roundings and work split of gemv_fused.cuh, so the results match the four
// fused_gemv calls up to the order of fp32 sums.
//
// Why one kernel: at batch 1 each product's kernel boundary (the previous grid draining, the
// next one's launch and its wait) cost ~1.5-2 us next to products of 1.4-4.2 us of bytes
// (docs/cuda_backend.md). Here one CTA per SM runs all four products; a grid barrier
// (grid_sync.cuh) separates them, and every CTA issues its first weight copies of the next
// product (and its norm weights) before it waits at the barrier, so the weight stream goes on
// across it.
//
// Residency: the barrier needs every CTA resident at once. The grid is one CTA per SM, and
// the kernel lets its dependents launch (programmatic dependent launch) only after its last
// barrier, so no later kernel's CTAs can take an SM from one of its own before then.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kestrel::kernels {

struct GemvChainProduct {
  const void* x = nullptr;       // bf16 [t, k] (product 2: [t, 2k], gate then up)
  const void* w = nullptr;       // bf16 [n, k]
  const void* bias = nullptr;    // bf16 [n] or null
  const void* norm_w = nullptr;  // bf16 [k]: products 1 and 3
  void* out = nullptr;           // bf16 [t, n] (products 0 and 2: added into)
  int64_t n = 0, k = 0;
};

struct GemvChain {
  GemvChainProduct p[4];
  int num_products = 4;  // 3: no product 3
  int64_t t = 0;
  float eps = 0.0f;
};

// True when gemv_chain() takes the chain: 1 <= t <= kFusedGemvMaxTokens, every product as
// fused_gemv_supported() asks, and one CTA of the kernel fits on an SM.
bool gemv_chain_supported(const GemvChain& chain);

// REQUIRES: gemv_chain_supported(chain). `counter`: a device u32 zeroed before its first use,
// that no other grid uses while this one runs (grid_sync.cuh: each barrier leaves its low 31
// bits zero, so it needs no reset between launches). `num_sms`: the device's multiprocessor count.
// Launched with launch_pdl.
void gemv_chain(const GemvChain& chain, unsigned* counter, int num_sms, cudaStream_t stream);

}  // namespace kestrel::kernels
