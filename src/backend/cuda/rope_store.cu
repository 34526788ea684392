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
// Launch: one warp per (token, head), 4 warps per block. Lane l holds the pairs
// [l*P, l*P + P) of the first half and their partners in the second half (P = D / 64; for
// D < 64, P = 1 and lanes D/2..31 hold nothing).
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/attention/kv_fp8.cuh"
#include "backend/cuda/attention/kv_layout.cuh"

namespace kestrel::kernels {
namespace {

constexpr int kWarpsPerBlock = 4;

// Writes a lane's pairs: dims [p0, p0 + P) from x1, [half + p0, half + p0 + P) from x2.
template <int P>
__device__ __forceinline__ void store_pairs(bf16* dst, int p0, int half, const float* x1,
                                            const float* x2) {
  BfVec<P> lo, hi;
#pragma unroll
  for (int j = 0; j < P; ++j) {
    lo.v[j] = __float2bfloat16(x1[j]);
    hi.v[j] = __float2bfloat16(x2[j]);
  }
  *reinterpret_cast<BfVec<P>*>(dst + p0) = lo;
  *reinterpret_cast<BfVec<P>*>(dst + half + p0) = hi;
}

template <int D, bool kHeadMajor, bool kFp8>
__global__ void qk_norm_rope_store_kernel(QkNormRopeArgs a) {
  pdl_wait();  // launch.cuh: before touching what earlier kernels write
  pdl_trigger();
  constexpr int kHalf = D / 2;
  constexpr int P = kHalf >= 32 ? kHalf / 32 : 1;  // pairs per lane
  const int64_t item = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int heads = a.num_q_heads + 2 * a.num_kv_heads;
  if (item >= int64_t(a.num_tokens) * heads) return;  // whole warp leaves together
  const int64_t t = item / heads;
  const int h = static_cast<int>(item - t * heads);
  const bool active = lane * P < kHalf;  // idle lanes hold zeros and store nothing
  const int p0 = active ? lane * P : 0;

  const bf16* src = a.qkv + item * D;
  BfVec<P> lo = *reinterpret_cast<const BfVec<P>*>(src + p0);
  BfVec<P> hi = *reinterpret_cast<const BfVec<P>*>(src + kHalf + p0);
  float x1[P], x2[P];
#pragma unroll
  for (int j = 0; j < P; ++j) {
    x1[j] = active ? __bfloat162float(lo.v[j]) : 0.0f;
    x2[j] = active ? __bfloat162float(hi.v[j]) : 0.0f;
  }

  const bool is_v = h >= a.num_q_heads + a.num_kv_heads;
  if (!is_v) {
    const bool is_q = h < a.num_q_heads;
    const bf16* norm_w = is_q ? a.q_norm : a.k_norm;
    if (norm_w != nullptr) {
      float ss = 0.0f;
#pragma unroll
      for (int j = 0; j < P; ++j) ss += x1[j] * x1[j] + x2[j] * x2[j];
      const float inv = rsqrtf(warp_sum(ss) / D + a.eps);
#pragma unroll
      for (int j = 0; j < P; ++j) {
        x1[j] = round_bf16(round_bf16(x1[j] * inv) * __bfloat162float(norm_w[p0 + j]));
        x2[j] = round_bf16(round_bf16(x2[j] * inv) * __bfloat162float(norm_w[kHalf + p0 + j]));
      }
    }
    int pos = a.positions[t];
    pos = pos < 0 ? 0 : (pos >= a.max_pos ? a.max_pos - 1 : pos);
    const float* cs = a.cos_sin + int64_t(pos) * D;
#pragma unroll
    for (int j = 0; j < P; ++j) {
      const float c = round_bf16(cs[p0 + j]);
      const float s = round_bf16(cs[kHalf + p0 + j]);
      const float y1 = round_bf16(x1[j] * c) - round_bf16(x2[j] * s);
      const float y2 = round_bf16(x2[j] * c) + round_bf16(x1[j] * s);
      x1[j] = y1;
      x2[j] = y2;
    }
  }

  if (h < a.num_q_heads) {
    if (active) store_pairs<P>(a.q_out + (t * a.num_q_heads + h) * D, p0, kHalf, x1, x2);
    return;
  }
  const int slot = a.slot_mapping[t];
  if (slot < 0) return;  // whole warp
  const int kv_head = is_v ? h - a.num_q_heads - a.num_kv_heads : h - a.num_q_heads;
  const int block = slot / a.block_size;
  const int64_t off = kv_row_offset<kHeadMajor>(block, slot - block * a.block_size, kv_head,
                                                a.num_kv_heads, a.block_size, D);
  void* cache = is_v ? a.v_cache : a.k_cache;
  if constexpr (!kFp8) {
    if (active) store_pairs<P>(static_cast<bf16*>(cache) + off, p0, kHalf, x1, x2);
  } else {
    const int q = (is_v ? a.num_kv_heads : 0) + kv_head;  // [2, Hkv] index
    const float inv = 1.0f / a.kv.scale[q];                 // exact: a power of two
    float amax = 0.0f, clamped = 0.0f;
    uint8_t* dst = static_cast<uint8_t*>(cache) + off;
#pragma unroll
    for (int j = 0; j < P; ++j) {
      if (!active) break;
      // The bf16 value a bf16 cache would hold (RoPE's last sum is not rounded yet), so that
      // fp8 quantizes what the model computes, once.
      x1[j] = round_bf16(x1[j]);
      x2[j] = round_bf16(x2[j]);
      amax = fmaxf(amax, fmaxf(fabsf(x1[j]), fabsf(x2[j])));
      const float y1 = x1[j] * inv, y2 = x2[j] * inv;
      clamped += (fabsf(y1) > kE4M3Max) + (fabsf(y2) > kE4M3Max);
      dst[p0 + j] = float_to_fp8(y1);
      dst[kHalf + p0 + j] = float_to_fp8(y2);
    }
    amax = warp_max(amax);
    clamped = warp_sum(clamped);
    if (lane == 0) {
      raise_amax(a.kv.amax + q, amax);
      count_clamped(a.kv.clamped + q, static_cast<int>(clamped));
    }
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
  const auto grid = static_cast<unsigned>((items + kWarpsPerBlock - 1) / kWarpsPerBlock);
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
