// The pieces of the sm_90a prefill attention kernels (attention_prefill_sm90a.cu,
// attention_prefill_ws_sm90a.cu) that do not depend on how key tiles reach shared memory:
// the CTA's Q tile, and one warpgroup's 64 rows of online softmax attention (S = Q K^T and
// O += P V on wgmma). Maths, rounding points and outputs as in attention_prefill.cu.
// Included by sm_90a .cu files only.
#pragma once

#include <cfloat>
#include <cstdint>

#include "backend/cuda/attention/attention_tiles.cuh"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/wgmma.cuh"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"

namespace kestrel::kernels::detail::sm90 {

using namespace ::kestrel::kernels::sm90;

constexpr int kPrefillRows = 128;  // (token, head) rows per CTA: two warpgroups of 64

// The first 1024-byte boundary at or after `raw` (the 128-byte swizzle's period).
__device__ __forceinline__ uint32_t aligned_smem_base(const unsigned char* raw) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(raw));
  return (addr + 1023) & ~1023u;
}

// Copies the CTA's Q rows into the swizzled Q tile at q (rows past num_rows: zeros), with
// threads [0, kThreads) of the CTA.
template <int D, int kThreads>
__device__ __forceinline__ void load_q(const PagedAttentionArgs& a, const PrefillWork& w,
                                       uint32_t q) {
  constexpr int kChunks = D / 8;
  for (int i = threadIdx.x; i < kPrefillRows * kChunks; i += kThreads) {
    const int r = i / kChunks;
    const int part = i % kChunks;
    const bool valid = r < w.num_rows;
    const int64_t tok = w.q_begin + w.first + (valid ? r / w.group : 0);
    const int head = w.g * w.group + r % w.group;
    cp_async_16(q + swizzled_chunk(r, part, kPrefillRows * 128),
                a.q + (tok * a.num_q_heads + head) * D + part * 8, valid);
  }
}

// One warpgroup's 64 rows [row0, row0 + 64) of a CTA's work: S [64, kKeys] and O [64, D] in
// the wgmma accumulator layout (per warp 16 rows; this thread holds rows lane / 4 and
// lane / 4 + 8 of its warp, columns 8 n + 2 (lane % 4) + {0, 1} of each n-block n).
template <int D, int kKeys>
struct WarpgroupRows {
  static_assert(kKeys == 128, "S is one m64n128 wgmma per k-step");
  static constexpr int kSNb = kKeys / 8;
  static constexpr int kONb = D / 8;
  static constexpr float kLog2e = 1.4426950408889634f;

  float s[kKeys / 2];
  float o[D / 2];
  float m[2], l[2];  // row max (raw score units) and this thread's part of the row sum
  int row0, row_base;
  int first_pos, last_pos;  // positions of the warpgroup's first and last rows (-1: none)
  float qscale;

  __device__ void init(const PrefillWork& w, float scale, int warpgroup_row0) {
    const int lane = threadIdx.x % 32;
    row0 = warpgroup_row0;
    row_base = row0 + 16 * ((threadIdx.x / 32) % 4) + lane / 4;
    first_pos = w.pos0 + min(row0, w.num_rows - 1) / w.group;
    last_pos = row0 >= w.num_rows          ? -1
               : row0 + 64 <= w.num_rows ? w.pos0 + (row0 + 63) / w.group
                                         : w.kv_end - 1;
    qscale = scale * kLog2e;
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < kKeys / 2; ++i) s[i] = 0.0f;
    m[0] = m[1] = -FLT_MAX;
    l[0] = l[1] = 0.0f;
  }

  // True when some row of the warpgroup sees a key of the tile starting at key0.
  __device__ bool needs(int key0) const { return key0 <= last_pos; }

  // One key tile: S = Q K^T (Q rows at shared address q, panels q_panel bytes apart; K at k,
  // panels kv_panel apart), mask, online softmax, O += P V (V at v). Waits for its wgmmas,
  // so the tile's buffers are free when it returns.
  __device__ void tile(const PrefillWork& w, int key0, uint32_t q, uint32_t q_panel, uint32_t k,
                       uint32_t v, uint32_t kv_panel) {
    issue_s(q, q_panel, k, kv_panel);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operand(s);
    float corr[2];
    softmax(w, key0, corr);
    rescale_o(corr);
    uint32_t p[kKeys / 16][4];
    pack_p(p);
    issue_pv(p, v, kv_panel);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operand(o);
  }

  // The tile's pieces, for kernels that overlap one tile's softmax with the tensor cores.
  // issue_s: S = Q K^T, issued but not committed (s is not readable until it completes).
  __device__ void issue_s(uint32_t q, uint32_t q_panel, uint32_t k, uint32_t kv_panel) {
    const uint64_t da0 = smem_desc(q, 16, 1024);
    const uint64_t db0 = smem_desc(k, 16, 1024);
    wgmma_fence_operand(s);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const uint32_t step = (ks % 4) * 32;  // k-step within the 128-byte line
      const uint64_t da = smem_desc_advance(da0, (ks / 4) * q_panel + step);
      const uint64_t db = smem_desc_advance(db0, (ks / 4) * kv_panel + step);
      wgmma_m64n128k16_ss(s, da, db, ks > 0);
    }
  }

  // Masks S (the tile of keys from key0) and turns it into exp2 values for P; updates the
  // row maxima and sums, and sets corr[h], the factor O's rows h must be scaled by once the
  // previous tiles' P V is in it. Touches neither o nor any wgmma in flight.
  __device__ void softmax(const PrefillWork& w, int key0, float (&corr)[2]) {
    const int lane = threadIdx.x % 32;
    if (key0 + kKeys - 1 > first_pos || key0 + kKeys > w.k_end) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int last = min(w.row_pos(row_base + 8 * h), w.k_end - 1);
#pragma unroll
        for (int nb = 0; nb < kSNb; ++nb) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            if (key0 + nb * 8 + 2 * (lane % 4) + c > last) s[4 * nb + 2 * h + c] = -INFINITY;
          }
        }
      }
    }

    // Online softmax. A row with no visible key yet keeps m = -FLT_MAX: p = 2^-inf = 0.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = m[h];
#pragma unroll
      for (int nb = 0; nb < kSNb; ++nb) mx = fmaxf(mx, fmaxf(s[4 * nb + 2 * h], s[4 * nb + 2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      corr[h] = exp2_ftz((m[h] - mx) * qscale);
      m[h] = mx;
      const float shift = mx * qscale;
      float sum = 0.0f;
#pragma unroll
      for (int nb = 0; nb < kSNb; ++nb) {
        s[4 * nb + 2 * h] = exp2_ftz(fmaf(s[4 * nb + 2 * h], qscale, -shift));
        s[4 * nb + 2 * h + 1] = exp2_ftz(fmaf(s[4 * nb + 2 * h + 1], qscale, -shift));
        sum += s[4 * nb + 2 * h] + s[4 * nb + 2 * h + 1];
      }
      l[h] = l[h] * corr[h] + sum;
    }
  }

  __device__ void rescale_o(const float (&corr)[2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int nb = 0; nb < kONb; ++nb) {
        o[4 * nb + 2 * h] *= corr[h];
        o[4 * nb + 2 * h + 1] *= corr[h];
      }
    }
  }

  // P in bf16 as the A operand of P V: k16 block kb is n-blocks 2 kb and 2 kb + 1.
  __device__ void pack_p(uint32_t (&p)[kKeys / 16][4]) const {
#pragma unroll
    for (int kb = 0; kb < kKeys / 16; ++kb) {
      p[kb][0] = pack_bf16(s[8 * kb + 0], s[8 * kb + 1]);
      p[kb][1] = pack_bf16(s[8 * kb + 2], s[8 * kb + 3]);
      p[kb][2] = pack_bf16(s[8 * kb + 4], s[8 * kb + 5]);
      p[kb][3] = pack_bf16(s[8 * kb + 6], s[8 * kb + 7]);
    }
  }

  // O += P V, issued but not committed; p and o stay in use until it completes.
  __device__ void issue_pv(const uint32_t (&p)[kKeys / 16][4], uint32_t v, uint32_t kv_panel) {
    const uint64_t db0 = smem_desc(v, kv_panel, 1024);
    wgmma_fence_operand(o);
    wgmma_fence();
#pragma unroll
    for (int kb = 0; kb < kKeys / 16; ++kb) {
      const uint64_t db = smem_desc_advance(db0, kb * 16 * 128);
      if constexpr (D == 128) {
        wgmma_m64n128k16_rs_tb(o, p[kb], db);
      } else {
        wgmma_m64n64k16_rs_tb(o, p[kb], db);
      }
    }
  }

  // Writes this thread's rows: normalised bf16 into a.out, or with key splits (part_acc set)
  // the fp32 partials for attention.cu's merge: part_ml [splits, T Hq, 2] (log2-domain max,
  // sum), part_acc [splits, T Hq, D] (unnormalised).
  // z: the key split (the partials' index).
  __device__ void store(const PagedAttentionArgs& a, const PrefillWork& w, int z, float* part_ml,
                        float* part_acc) const {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float sum = l[h];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int r = row_base + 8 * h;
      if (r >= w.num_rows) continue;
      const int64_t row = (w.q_begin + w.first + r / w.group) * int64_t(a.num_q_heads) +
                          w.g * w.group + r % w.group;
      const int col = 2 * (lane % 4);
      if (part_acc == nullptr) {
        const float inv = 1.0f / sum;
#pragma unroll
        for (int nb = 0; nb < kONb; ++nb) {
          *reinterpret_cast<__nv_bfloat162*>(a.out + row * D + nb * 8 + col) =
              __floats2bfloat162_rn(o[4 * nb + 2 * h] * inv, o[4 * nb + 2 * h + 1] * inv);
        }
      } else {
        const int64_t part = int64_t(z) * a.num_tokens * a.num_q_heads + row;
        if (lane % 4 == 0) {
          part_ml[2 * part] = m[h] * qscale;  // the merge works in the log2 domain
          part_ml[2 * part + 1] = sum;
        }
#pragma unroll
        for (int nb = 0; nb < kONb; ++nb) {
          *reinterpret_cast<float2*>(part_acc + part * D + nb * 8 + col) =
              make_float2(o[4 * nb + 2 * h], o[4 * nb + 2 * h + 1]);
        }
      }
    }
  }
};

}  // namespace kestrel::kernels::detail::sm90
