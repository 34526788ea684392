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
// slot(t) = slot_mapping[t]; -1 stores nothing. K/V layout: kv_layout.cuh.
//
// Launch: one warp per (token, head), 4 warps per block. Lane l holds the pairs
// [l*P, l*P + P) of the first half and their partners in the second half (P = D / 64; for
// D < 64, P = 1 and lanes D/2..31 hold nothing).
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/attention/kv_layout.cuh"

namespace kestrel::kernels {
namespace {

constexpr int kWarpsPerBlock = 4;

template <int D, bool kHeadMajor>
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

  bf16* dst;
  if (h < a.num_q_heads) {
    dst = a.q_out + (t * a.num_q_heads + h) * D;
  } else {
    const int slot = a.slot_mapping[t];
    if (slot < 0) return;
    const int kv_head = is_v ? h - a.num_q_heads - a.num_kv_heads : h - a.num_q_heads;
    bf16* cache = is_v ? a.v_cache : a.k_cache;
    const int block = slot / a.block_size;
    dst = cache + kv_row_offset<kHeadMajor>(block, slot - block * a.block_size, kv_head,
                                            a.num_kv_heads, a.block_size, D);
  }
  if (!active) return;
#pragma unroll
  for (int j = 0; j < P; ++j) {
    lo.v[j] = __float2bfloat16(x1[j]);
    hi.v[j] = __float2bfloat16(x2[j]);
  }
  *reinterpret_cast<BfVec<P>*>(dst + p0) = lo;
  *reinterpret_cast<BfVec<P>*>(dst + kHalf + p0) = hi;
}

template <int D>
void launch(const QkNormRopeArgs& a, unsigned grid, cudaStream_t stream) {
  constexpr int kThreads = kWarpsPerBlock * 32;
  if (a.kv_head_major) {
    launch_pdl("qk_norm_rope_store_kernel", qk_norm_rope_store_kernel<D, true>, grid, kThreads, 0, stream, a);
  } else {
    launch_pdl("qk_norm_rope_store_kernel", qk_norm_rope_store_kernel<D, false>, grid, kThreads, 0, stream, a);
  }
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
