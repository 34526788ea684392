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
// 32 / kLanes heads at once; lane `sub` of a head holds dims [8 sub, 8 sub + 8), its RoPE
// partners in lane sub ^ kLanes / 2, and moves them with 16-byte loads and stores. A warp
// takes kHeadsPerWarp heads of one token in kPasses passes (prompt-sized steps: 8 heads; a
// decode step's: one pass): the token's cos/sin, norm weights and slot are loaded once for
// all of them, and all passes' qkv loads are issued before the first is used. 4 warps per
// block. (Session 11: a warp took 32 / kLanes heads
// of any tokens, every lane loading its token's rope row for 16 bytes of qkv: 59% of the
// kernel's bytes at 8,192 prompt tokens on an H100, ncu. Before that, a warp per head with
// 4 bytes per lane: 39%.) The loads that need no qkv are the fused decode kernel's (RopeRow,
// attention/attention_decode_rope.cuh), and so is the maths (norm_rope8 there, whose lanes
// all shuffle, so that a V head and a K head can share a warp).
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

// kPasses > 1 only for prompt-sized steps: with fewer warps, a decode step's 256 tokens
// ran 5.7 -> 7.0 us (ncu, H100), each warp's passes in series where one pass per warp had
// all of them in parallel. The launcher picks by the number of warps (kMinWarpsPerSm).
template <int D, bool kManyPasses>
struct RopeGeometry {
  static constexpr int kLanes = D / 8;                     // lanes per head
  static constexpr int kHeadsPerPass = 32 / kLanes;        // heads a warp holds at once
  static constexpr int kHeadsPerWarp = kManyPasses && kHeadsPerPass < 8 ? 8 : kHeadsPerPass;
  static constexpr int kPasses = kHeadsPerWarp / kHeadsPerPass;
};
constexpr int kMinWarpsPerSm = 32;  // of the several-pass geometry, else one pass

template <int D, bool kManyPasses, bool kHeadMajor, bool kFp8>
__global__ void qk_norm_rope_store_kernel(QkNormRopeArgs a) {
  pdl_wait();  // launch.cuh: before touching what earlier kernels write
  pdl_trigger();
  using G = RopeGeometry<D, kManyPasses>;
  constexpr int kLanes = G::kLanes;
  const int lane = threadIdx.x % 32;
  const int sub = lane % kLanes;
  const int heads = a.num_q_heads + 2 * a.num_kv_heads;
  const int groups = (heads + G::kHeadsPerWarp - 1) / G::kHeadsPerWarp;  // per token
  const int64_t warp = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (warp >= int64_t(a.num_tokens) * groups) return;  // whole warp leaves together
  const int t = static_cast<int>(warp / groups);
  const int h0 = static_cast<int>(warp - int64_t(t) * groups) * G::kHeadsPerWarp + lane / kLanes;
  const int h_end = min(heads, h0 - lane / kLanes + G::kHeadsPerWarp);

  // Every pass's qkv first (a lane past the warp's heads loads its last one: it takes part in
  // the shuffles and stores nothing), then the loads that need no qkv.
  uint4 raw[G::kPasses];
#pragma unroll
  for (int p = 0; p < G::kPasses; ++p) {
    const int h = min(h0 + p * G::kHeadsPerPass, h_end - 1);
    raw[p] = *reinterpret_cast<const uint4*>(a.qkv + (int64_t(t) * heads + h) * D + sub * 8);
  }
  detail::RopeRow rr;  // cos, sin, both norms' weights, the slot
  rr.load<kLanes>(a, t, sub);

#pragma unroll
  for (int p = 0; p < G::kPasses; ++p) {
    const int h = h0 + p * G::kHeadsPerPass;
    const bool valid = h < h_end;
    const bool is_q = h < a.num_q_heads;
    const bool is_v = h >= a.num_q_heads + a.num_kv_heads;
    float x[8];
    unpack8(raw[p], x);

    // RMSNorm and RoPE with every lane shuffling; V heads (and heads without a norm weight)
    // keep what they had.
    const bf16* norm_w = is_v ? nullptr : is_q ? a.q_norm : a.k_norm;
    detail::norm_rope8<kLanes>(x, norm_w != nullptr, is_q, is_v, a.eps, rr, sub);
    if (!valid) continue;

    if (is_q) {
      *reinterpret_cast<uint4*>(a.q_out + (int64_t(t) * a.num_q_heads + h) * D + sub * 8) = pack8(x);
      continue;
    }
    if (rr.kv_slot < 0) continue;
    const int kv_head = is_v ? h - a.num_q_heads - a.num_kv_heads : h - a.num_q_heads;
    detail::store_kv8<D, kHeadMajor, kFp8>(a, x, is_v, kv_head, rr.kv_slot, sub);
  }
}

int64_t warps_for(int64_t tokens, int heads, int heads_per_warp) {
  return tokens * ((heads + heads_per_warp - 1) / heads_per_warp);
}

template <int D, bool kManyPasses>
void launch(const QkNormRopeArgs& a, cudaStream_t stream) {
  constexpr int kThreads = kWarpsPerBlock * 32;
  const int64_t warps = warps_for(a.num_tokens, a.num_q_heads + 2 * a.num_kv_heads,
                                  RopeGeometry<D, kManyPasses>::kHeadsPerWarp);
  const auto grid = static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
  auto go = [&](auto kernel) {
    launch_pdl("qk_norm_rope_store_kernel", kernel, grid, kThreads, 0, stream, a);
  };
  if (a.kv.fp8) {
    a.kv_head_major ? go(qk_norm_rope_store_kernel<D, kManyPasses, true, true>)
                    : go(qk_norm_rope_store_kernel<D, kManyPasses, false, true>);
  } else {
    a.kv_head_major ? go(qk_norm_rope_store_kernel<D, kManyPasses, true, false>)
                    : go(qk_norm_rope_store_kernel<D, kManyPasses, false, false>);
  }
}

template <int D>
void launch(const QkNormRopeArgs& a, cudaStream_t stream) {
  int device = 0, sms = 1;
  KS_CUDA_CHECK(cudaGetDevice(&device));
  KS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t many = warps_for(a.num_tokens, a.num_q_heads + 2 * a.num_kv_heads,
                                 RopeGeometry<D, true>::kHeadsPerWarp);
  if (many >= int64_t(kMinWarpsPerSm) * sms) return launch<D, true>(a, stream);
  launch<D, false>(a, stream);
}

}  // namespace

void qk_norm_rope_store(const QkNormRopeArgs& a, cudaStream_t stream) {
  if (int64_t(a.num_tokens) * (a.num_q_heads + 2 * a.num_kv_heads) == 0) return;
  switch (a.head_dim) {
    case 16: launch<16>(a, stream); break;
    case 32: launch<32>(a, stream); break;
    case 64: launch<64>(a, stream); break;
    case 128: launch<128>(a, stream); break;
    case 256: launch<256>(a, stream); break;
    default: KS_CUDA_CHECK(cudaErrorInvalidValue);  // entry point validates head_dim first
  }
  KS_CUDA_CHECK_LAUNCH("qk_norm_rope_store_kernel");
}

}  // namespace kestrel::kernels
