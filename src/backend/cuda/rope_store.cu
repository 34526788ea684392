// Per-head q/k RMSNorm, rotary embedding and the store of K/V into the paged cache, in one
// kernel (one read of qkv, one write of q and of the new K/V).
//
// For token t and head h of qkv [T, (Hq + 2 Hkv) D]:
//   q heads (h < Hq):        q_out[t, h] = rope(norm_q(qkv[t, h]))
//   k heads (next Hkv):      k_cache[slot(t), h - Hq] = rope(norm_k(qkv[t, h]))
//   v heads (last Hkv):      v_cache[slot(t), h - Hq - Hkv] = qkv[t, h]
// norm(x) = bf16(w * bf16(x * rsqrt(mean(x^2) + eps))) when a norm weight is given;
// rope is neox style (pairs i and i + D/2) with cos/sin rounded to bf16 and each product and
// the sum rounded to bf16, as HF's apply_rotary_pos_emb does in a bf16 model.
// slot(t) = slot_mapping[t]; -1 stores nothing. K/V layout: kv_layout.cuh. An fp8 cache
// (KvQuant) gets e4m3(x / scale) of each K/V value x as bf16 (the value a bf16 cache would
// hold) and its scale's amax and clamp count (kv_fp8.cuh).
//
// Launch: 8 dims per lane, so a head is D / 8 adjacent lanes (kLanes) and a warp holds
// 32 / kLanes (token, head) items, consecutive in [T, heads] order; 4 warps per block. Lane
// `sub` of a head holds dims [8 sub, 8 sub + 8), its RoPE partners in lane sub ^ kLanes / 2,
// and moves them with 16-byte loads and stores. (Until session 11: a warp per item, each lane
// moving 4 bytes; at 8,192 prompt tokens that ran at 39% of the kernel's bytes, too few in
// flight per SM.) The loads that need no qkv are the fused decode kernel's (RopeRow,
// attention/attention_decode_rope.cuh); the RMSNorm/RoPE loop below repeats its norm_rope8
// except that every lane shuffles, so that a V head and a K head can share a warp.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/attention/attention_decode_rope.cuh"
#include "backend/cuda/attention/kv_fp8.cuh"
#include "backend/cuda/attention/kv_layout.cuh"

namespace kestrel::kernels {
namespace {

constexpr int kWarpsPerBlock = 4;

template <int D, bool kHeadMajor, bool kFp8>
__global__ void qk_norm_rope_store_kernel(QkNormRopeArgs a) {
  pdl_wait();  // launch.cuh: before touching what earlier kernels write
  pdl_trigger();
  constexpr int kLanes = D / 8;
  constexpr int kItemsPerWarp = 32 / kLanes;
  const int lane = threadIdx.x % 32;
  const int sub = lane % kLanes;
  const int heads = a.num_q_heads + 2 * a.num_kv_heads;
  const int64_t total = int64_t(a.num_tokens) * heads;
  const int64_t first = (int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32) * kItemsPerWarp;
  if (first >= total) return;  // whole warp leaves together
  // Lanes past the last item compute on a copy of it (every lane takes part in the
  // shuffles) and store nothing.
  const int64_t mine = first + lane / kLanes;
  const bool valid = mine < total;
  const int64_t item = valid ? mine : total - 1;
  const int t = static_cast<int>(item / heads);
  const int h = static_cast<int>(item - int64_t(t) * heads);
  const bool is_q = h < a.num_q_heads;
  const bool is_v = h >= a.num_q_heads + a.num_kv_heads;

  detail::RopeRow rr;  // cos, sin, both norms' weights, the slot: loads that need no qkv
  rr.load<kLanes>(a, t, sub);
  float x[8];
  unpack8(*reinterpret_cast<const uint4*>(a.qkv + item * D + sub * 8), x);

  // RMSNorm and RoPE with every lane shuffling; V heads (and heads without a norm weight)
  // keep what they had.
  const bf16* norm_w = is_v ? nullptr : is_q ? a.q_norm : a.k_norm;
  float ss = 0.0f;
#pragma unroll
  for (int e = 0; e < 8; ++e) ss += x[e] * x[e];
#pragma unroll
  for (int o = kLanes / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (norm_w != nullptr) {
    const float inv = rsqrtf(ss / D + a.eps);
#pragma unroll
    for (int e = 0; e < 8; ++e) {  // per element: a pointer into rr would put it on the stack
      const float w = is_q ? rr.q_norm[e] : rr.k_norm[e];
      x[e] = round_bf16(round_bf16(x[e] * inv) * w);
    }
  }
  const bool first_half = sub < kLanes / 2;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const float other = __shfl_xor_sync(0xffffffffu, x[e], kLanes / 2);
    if (is_v) continue;
    const float cx = round_bf16(x[e] * round_bf16(rr.cos[e]));
    const float so = round_bf16(other * round_bf16(rr.sin[e]));
    x[e] = round_bf16(first_half ? cx - so : cx + so);  // x1 c - x2 s | x2 c + x1 s
  }
  if (!valid) return;  // no shuffles below

  if (is_q) {
    *reinterpret_cast<uint4*>(a.q_out + (int64_t(t) * a.num_q_heads + h) * D + sub * 8) = pack8(x);
    return;
  }
  const int slot = rr.kv_slot;
  if (slot < 0) return;
  const int kv_head = is_v ? h - a.num_q_heads - a.num_kv_heads : h - a.num_q_heads;
  const int block = slot / a.block_size;
  const int64_t off = kv_row_offset<kHeadMajor>(block, slot - block * a.block_size, kv_head,
                                                a.num_kv_heads, a.block_size, D) +
                      sub * 8;
  void* cache = is_v ? a.v_cache : a.k_cache;
  if constexpr (!kFp8) {
    *reinterpret_cast<uint4*>(static_cast<bf16*>(cache) + off) = pack8(x);
  } else {
    // The bf16 values a bf16 cache would hold, quantized once; this lane's own amax and clamp
    // count (raise_amax reads before it writes, so most lanes leave the atomics alone).
    const int q = (is_v ? a.num_kv_heads : 0) + kv_head;  // [2, Hkv] index
    float amax = 0.0f;
    int clamped = 0;
    const uint2 bytes = quantize8(x, 1.0f / a.kv.scale[q], amax, clamped);  // exact: 2^k
    *reinterpret_cast<uint2*>(static_cast<uint8_t*>(cache) + off) = bytes;
    raise_amax(a.kv.amax + q, amax);
    count_clamped(a.kv.clamped + q, clamped);
  }
}

template <int D, bool kFp8>
void launch(const QkNormRopeArgs& a, unsigned grid, cudaStream_t stream) {
  constexpr int kThreads = kWarpsPerBlock * 32;
  if (a.kv_head_major) {
    launch_pdl("qk_norm_rope_store_kernel", qk_norm_rope_store_kernel<D, true, kFp8>, grid, kThreads, 0, stream, a);
  } else {
    launch_pdl("qk_norm_rope_store_kernel", qk_norm_rope_store_kernel<D, false, kFp8>, grid, kThreads, 0, stream, a);
  }
}

template <int D>
void launch(const QkNormRopeArgs& a, unsigned grid, cudaStream_t stream) {
  if (a.kv.fp8) return launch<D, true>(a, grid, stream);
  launch<D, false>(a, grid, stream);
}

}  // namespace

void qk_norm_rope_store(const QkNormRopeArgs& a, cudaStream_t stream) {
  const int64_t items = int64_t(a.num_tokens) * (a.num_q_heads + 2 * a.num_kv_heads);
  if (items == 0) return;
  const int64_t warps = (items * (a.head_dim / 8) + 31) / 32;  // head_dim / 8 lanes per item
  const auto grid = static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
  switch (a.head_dim) {
    case 16: launch<16>(a, grid, stream); break;
    case 32: launch<32>(a, grid, stream); break;
    case 64: launch<64>(a, grid, stream); break;
    case 128: launch<128>(a, grid, stream); break;
    case 256: launch<256>(a, grid, stream); break;
    default: KS_CUDA_CHECK(cudaErrorInvalidValue);  // entry point validates head_dim first
  }
  KS_CUDA_CHECK_LAUNCH("qk_norm_rope_store_kernel");
}

}  // namespace kestrel::kernels
