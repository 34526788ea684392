// The prompt GEMM's qkv epilogue (gemm_ws_sm90a.cu, gemm_ws_rope): qk_norm_rope_store
// (rope_store.cu) on a staged 64-token x 256-column tile of the qkv product, run by the
// kernel's epilogue warps while the computing warpgroups go on to their next tile.
//
// A 256-column tile is two whole heads of D = 128, both q, both k or both v (Hq and Hkv are
// even). Before a tile is staged, the epilogue warps gather what its 64 tokens need into a
// shared-memory table: each token's row of the cos/sin table rounded to bf16 (the values
// rope_store.cu rounds to before use; rope.cos_sin_bf16, which the backend keeps) and its
// cache slot. Then a warp takes four tokens at a time: lanes
// 0-15 the first head, 16-31 the second, 8 dims per lane (rope_store.cu's geometry at D =
// 128), the RMSNorm and RoPE of norm_rope8 (attention_decode_rope.cuh) on the staged bf16
// values, and 16-byte stores to q_out or the cache. So the output is bit for bit what the
// plain product followed by qk_norm_rope_store writes (the test checks it). bf16 caches only.
// Included by gemm_ws_sm90a.cu alone.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/attention/attention_decode_rope.cuh"
#include "backend/cuda/attention/kv_layout.cuh"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/warpgroup_sync.cuh"

namespace kestrel::kernels::gemm_ws_epilogue {

constexpr int kRopeD = 128;
// The table: [64 tokens][cos 64 | sin 64] bf16, then [64] int32 positions and [64] slots.
constexpr uint32_t kRopeTableBytes = 64 * kRopeD * 2 + 64 * 4 * 2;  // + positions, slots

// Fills the table for tokens row0 .. row0 + 63 (those past T get slot -1 and no cos/sin):
// the positions first (through the table's words), then each token's row of the bf16 cos/sin
// table by 16-byte cp.async copies, all in flight at once and held in no registers. (With
// the fp32 table each cos/sin load waited on its position's, two L2 round trips apiece, and
// converting in registers spilled: the epilogue took ~29 us a 1,024-deep tile, three times
// the products it follows.) `rope_heads`: the tile's heads are q or k (v needs the slots
// alone). Every epilogue thread calls it; the caller syncs them before (the table's last
// readers) and after.
template <int kThreads>
__device__ __forceinline__ void fill_rope_table(const QkNormRopeArgs& a, int row0, bool rope_heads,
                                                uint32_t table, int tid, int barrier) {
  const uint32_t positions = table + 64 * kRopeD * 2, slots = positions + 64 * 4;
  if (tid < 64) {
    const int t = row0 + tid;
    const int slot = t < a.num_tokens ? a.slot_mapping[t] : -1;
    const int pos = detail::rope_position(t < a.num_tokens ? a.positions[t] : 0, a.max_pos);
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(slots + 4 * tid), "r"(slot) : "memory");
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(positions + 4 * tid), "r"(pos) : "memory");
  }
  if (!rope_heads) return;
  sm90::named_barrier_sync(barrier, kThreads);
  constexpr int kParts = kRopeD * 2 / 16;  // 16-byte chunks of a bf16 row
  for (int i = tid; i < 64 * kParts; i += kThreads) {
    const int r = i / kParts, part = i % kParts;
    int pos;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(pos) : "r"(positions + 4 * r) : "memory");
    cp_async_16<CopyCache::kL1>(table + r * kRopeD * 2 + part * 16,
                                a.cos_sin_bf16 + int64_t(pos) * kRopeD + part * 8, true);
  }
  cp_async_commit();
  cp_async_wait<0>();
}

// norm_rope8's maths (attention_decode_rope.cuh) on kRows tokens' heads at once, so that a
// warp's dependent chains (the sum's shuffles, rsqrt, the roundings) interleave, on values
// and results as bf16 pairs. Bit for bit norm_rope8's: where it rounds the fp32 product of
// two bf16 values (the norm weight's, cos's, sin's) a bf16 multiply rounds the same exact
// product (16 significant bits: exact in fp32) once; the other roundings stay fp32 ones,
// two values per conversion. (One value at a time, with an fp32 multiply and a conversion
// for each of the five roundings, three epilogue warps took ~20 us a tile, twice the
// products they follow.) x: [kRows][4] bf16 pairs, dims 8 sub .. 8 sub + 7 of a head.
template <int kRows>
__device__ __forceinline__ void norm_rope_rows(uint32_t (&x)[kRows][4], bool norm,
                                               const uint32_t (&w)[4], float eps,
                                               const uint32_t (&cs)[kRows], int sub) {
  constexpr int kLanes = kRopeD / 8;
  auto as_bf2 = [](uint32_t v) { return *reinterpret_cast<const __nv_bfloat162*>(&v); };
  auto as_u32 = [](__nv_bfloat162 v) { return *reinterpret_cast<const uint32_t*>(&v); };
  if (norm) {
    float ss[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      float f[8];
      unpack8(make_uint4(x[i][0], x[i][1], x[i][2], x[i][3]), f);
      ss[i] = 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e) ss[i] += f[e] * f[e];
    }
#pragma unroll
    for (int o = kLanes / 2; o > 0; o >>= 1) {
#pragma unroll
      for (int i = 0; i < kRows; ++i) ss[i] += __shfl_xor_sync(0xffffffffu, ss[i], o);
    }
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const float inv = rsqrtf(ss[i] / kRopeD + eps);
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        const float2 f = __bfloat1622float2(as_bf2(x[i][p]));
        x[i][p] = as_u32(__hmul2(__floats2bfloat162_rn(f.x * inv, f.y * inv), as_bf2(w[p])));
      }
    }
  }
  const bool first_half = sub < kLanes / 2;
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    uint4 c, s;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(c.x), "=r"(c.y), "=r"(c.z), "=r"(c.w) : "r"(cs[i]) : "memory");
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(s.x), "=r"(s.y), "=r"(s.z), "=r"(s.w) : "r"(cs[i] + kRopeD) : "memory");
    const uint32_t cp[4] = {c.x, c.y, c.z, c.w}, sp[4] = {s.x, s.y, s.z, s.w};
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const uint32_t other = __shfl_xor_sync(0xffffffffu, x[i][p], kLanes / 2);
      const float2 cx = __bfloat1622float2(__hmul2(as_bf2(x[i][p]), as_bf2(cp[p])));
      const float2 so = __bfloat1622float2(__hmul2(as_bf2(other), as_bf2(sp[p])));
      // x1 c - x2 s | x2 c + x1 s
      x[i][p] = as_u32(first_half ? __floats2bfloat162_rn(cx.x - so.x, cx.y - so.y)
                                  : __floats2bfloat162_rn(cx.x + so.x, cx.y + so.y));
    }
  }
}

// qk_norm_rope_store on the staged tile (64 rows x 2 heads, 128-byte-swizzled panels of 64
// columns `panel_bytes` apart) whose first head is h0 and first token row0. Warp `warp` of
// kWarps takes rows warp, warp + kWarps, ..., kRows of them at a time.
template <int kWarps, bool kHeadMajor>
__device__ __forceinline__ void rope_store_tile(const QkNormRopeArgs& a, uint32_t staging,
                                                uint32_t panel_bytes, uint32_t table, int row0,
                                                int h0, int warp) {
  constexpr int kLanes = kRopeD / 8;
  constexpr int kRows = 4;
  const int lane = threadIdx.x % 32;
  const int sub = lane % kLanes, hh = lane / kLanes;
  const int h = h0 + hh;
  const bool is_q = h0 < a.num_q_heads;
  const bool is_v = h0 >= a.num_q_heads + a.num_kv_heads;
  const bf16* norm = is_v ? nullptr : is_q ? a.q_norm : a.k_norm;
  uint32_t w[4] = {};
  if (norm != nullptr) {
    const uint4 raw = *reinterpret_cast<const uint4*>(norm + sub * 8);
    w[0] = raw.x, w[1] = raw.y, w[2] = raw.z, w[3] = raw.w;
  }
  const int pair = (sub < kLanes / 2 ? sub : sub - kLanes / 2) * 8;  // RopeRow::load's
  const int kv_head = is_v ? h - a.num_q_heads - a.num_kv_heads : h - a.num_q_heads;
  const uint32_t chunk_base = staging + (hh * 2 + sub / 8) * panel_bytes;
  for (int r0 = warp; r0 < 64; r0 += kWarps * kRows) {
    // Rows past the tile repeat its last one (for the shuffles) and store nothing.
    int rows[kRows];
    uint32_t x[kRows][4];
    uint32_t cs[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      rows[i] = min(r0 + i * kWarps, 63);
      asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(x[i][0]), "=r"(x[i][1]), "=r"(x[i][2]), "=r"(x[i][3])
                   : "r"(chunk_base + rows[i] * 128 + (((sub % 8) ^ (rows[i] % 8)) << 4))
                   : "memory");
      cs[i] = table + rows[i] * kRopeD * 2 + pair * 2;
    }
    if (!is_v) norm_rope_rows<kRows>(x, norm != nullptr, w, a.eps, cs, sub);
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int t = row0 + rows[i];
      if (r0 + i * kWarps >= 64 || t >= a.num_tokens) continue;
      if (is_q) {
        *reinterpret_cast<uint4*>(a.q_out + (int64_t(t) * a.num_q_heads + h) * kRopeD + sub * 8) =
            make_uint4(x[i][0], x[i][1], x[i][2], x[i][3]);
        continue;
      }
      int slot;
      asm volatile("ld.shared.b32 %0, [%1];\n"
                   : "=r"(slot)
                   : "r"(table + 64 * kRopeD * 2 + 64 * 4 + 4 * rows[i])
                   : "memory");
      if (slot < 0) continue;
      const int block = slot / a.block_size;
      const int64_t off = kv_row_offset<kHeadMajor>(block, slot - block * a.block_size, kv_head,
                                                    a.num_kv_heads, a.block_size, kRopeD) +
                          sub * 8;
      *reinterpret_cast<uint4*>(static_cast<bf16*>(is_v ? a.v_cache : a.k_cache) + off) =
          make_uint4(x[i][0], x[i][1], x[i][2], x[i][3]);
    }
  }
}

}  // namespace kestrel::kernels::gemm_ws_epilogue
