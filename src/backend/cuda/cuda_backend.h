// The CUDA backend: BF16 activations, weights and KV cache; kernels of our own for the
// element-wise, normalisation, RoPE/KV-store and attention ops, cuBLASLt for the GEMMs.
// A plain C++ header (no CUDA types) so that code built without nvcc can include it.
//
// Contract beyond backend.h:
// - compute_dtype() is BF16. Ops take BF16 activations and weights; linear() may write an
//   F32 out (logits); qk_norm_rope_store() takes cos_sin in F32; metadata tensors are I32.
//   All tensors must live on this backend's device (empty()/upload()/allocate_kv_cache()).
// - KV cache: per layer K and V pages (BF16 or F8E4M3) in the backend's CudaKvLayout, all
//   layers in one allocation; the tensors' shapes spell the layout. A kAuto backend settles
//   its layout at its first allocate_kv_cache and keeps it for later ones.
// - Head dims: attention 16, 32, 64 and 128; qk_norm_rope_store also 256. GQA groups up to 16
//   query heads per KV head.
// - Ops are enqueued on the backend's own stream and return at once; to_host() and
//   synchronize() wait. Tensors from empty() come from a stream-ordered pool (freed memory is
//   kept for reuse, not returned to the driver); their contents are undefined.
// - Device metadata cannot be validated without a synchronisation, so it is trusted:
//   positions are clamped to the cos_sin table, token ids / rows outside the table read as
//   zeros, slot -1 stores nothing; other out-of-range values are undefined behaviour.
// - attention() splits each sequence's keys over several CTAs (Flash-Decoding) when the
//   batch is too small to fill the GPU, guided by the host-side meta.max_seq_len (a wrong
//   value costs speed, never correctness). Its fp32 partials live in a backend scratch buffer
//   that grows when a call needs more: for CUDA graph capture, run the captured shapes once
//   before capturing so that no allocation happens inside the capture.
// - Errors: bad shapes, dtypes or devices throw kestrel::Error naming the op; failed CUDA or
//   cuBLAS calls throw kestrel::Error naming the call, file and line.
// - Thread safety: one thread at a time per backend; that thread's current CUDA device must
//   be the backend's (the constructor makes it current on the constructing thread).
#pragma once

#include <memory>

#include "backend/backend.h"

namespace kestrel {

// How a layer's K (and V) pages are laid out.
enum class CudaKvLayout {
  kTokenMajor,  // [num_blocks, block_size, num_kv_heads, head_dim] (the CPU backend's)
  kHeadMajor,   // [num_blocks, num_kv_heads, block_size, head_dim]: a page of one head is
                // one contiguous run
  kAuto,        // chosen by the first allocate_kv_cache from the cache's dtype: head-major for fp8
                // (a key's row of one head is only D bytes there, and decode attention reads
                // 16-key runs of 16 D bytes at ~4% more of the copy rate than 16 rows 8 heads
                // apart; docs/kv_cache.md), token-major for bf16. The environment variable
                // KESTREL_KV_LAYOUT=token or =head forces one (for comparisons).
};

// True when the CUDA runtime loads and sees at least one device; false without a driver or
// a GPU (never throws).
bool cuda_device_available();
// Devices the CUDA runtime sees (after CUDA_VISIBLE_DEVICES); 0 without a driver or a GPU.
int cuda_device_count();

// A backend on GPU `device_index`. Throws kestrel::Error when there is no such device.
std::unique_ptr<Backend> make_cuda_backend(int device_index = 0,
                                           CudaKvLayout kv_layout = CudaKvLayout::kAuto);

}  // namespace kestrel
