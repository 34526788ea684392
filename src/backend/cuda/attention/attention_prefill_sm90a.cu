// Paged attention for batches with prefill rows on Hopper's warpgroup tensor cores (wgmma),
// the sm_90a twin of attention_prefill.cu: same maths, rounding points, work lookup, key
// splits and outputs (see there), different geometry.
//
// Geometry. A CTA of 2 warpgroups (256 threads) owns 128 rows of one (sequence, KV head,
// query tile), laid out as in attention_prefill.cu (row r: token r / G, head g G + r % G);
// warpgroup w owns rows [64 w, 64 w + 64), one wgmma M of 64.
// - Q [128, D] is copied once into shared memory (128-byte swizzle, wgmma.cuh) and read by
//   the tensor cores from there: S = Q K^T is a wgmma with both operands in shared memory.
// - Keys stream in tiles of kKeys = 128 (K and V [128, D] each, the same swizzled layout),
//   double-buffered with cp.async; each key row's cache offset is found once, by one thread,
//   two tiles ahead (as in attention_prefill.cu).
// - S [64, 128] per warpgroup (64 fp32 per thread, the m16n8 accumulator layout per warp);
//   causal mask and online softmax in registers as in attention_prefill.cu; P rounded once
//   to bf16 becomes the A operand of O += P V straight from registers, with V read
//   MN-major (transposed) from shared memory. O [64, D] is D / 2 fp32 per thread.
// - A warpgroup skips key tiles past its last row's position (wgmma is warpgroup-wide, so
//   skipping is per warpgroup, not per warp).
// Shared memory: Q 32 KB + 2 stages x (K + V) 128 KB + 2 KB of offsets at D = 128 (aligned
// to 1 KB for the swizzle); one CTA per SM, 236 registers at D = 128.
// Not done yet (docs/cuda_backend.md has the variants measured): the two warpgroups run in
// step (one barrier per tile), so one's softmax does not overlap the other's matrix work;
// FlashAttention-3 gets that from a producer warp with mbarriers and a ping-pong schedule.
#include <cfloat>

#include "backend/cuda/attention/attention_prefill.cuh"
#include "backend/cuda/attention/attention_tiles.cuh"
#include "backend/cuda/attention/kv_layout.cuh"
#include "backend/cuda/attention/wgmma.cuh"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"

namespace kestrel::kernels::detail {
namespace {

using namespace sm90;

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kStages = 2;  // K/V tile buffers

// The geometry (see the top): kWarpGroups warpgroups of 64 rows each, kKeys keys per tile.
template <int D, int kWarpGroups, int kKeys>
struct Layout {
  static constexpr int kThreads = 128 * kWarpGroups;
  static constexpr int kRows = 64 * kWarpGroups;  // (token, head) rows per CTA
  // Shared memory, byte offsets from a 1024-byte aligned base.
  static constexpr uint32_t kQPanel = kRows * 128;   // one 64-column panel of Q
  static constexpr uint32_t kKvPanel = kKeys * 128;  // one 64-column panel of a K or V tile
  static constexpr uint32_t kQ = 0;
  static constexpr uint32_t kK = kQ + (D / 64) * kQPanel;                // K[kStages]
  static constexpr uint32_t kV = kK + kStages * (D / 64) * kKvPanel;     // V[kStages]
  static constexpr uint32_t kOff = kV + kStages * (D / 64) * kKvPanel;   // int64 off[kStages][kKeys]
  static constexpr uint32_t kBytes = kOff + kStages * kKeys * 8;
  static constexpr uint32_t kAlloc = kBytes + 1024;                 // slack for the alignment
};

__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// o += P V for one key tile: D = 64 and 128 take one wgmma of N = D per 16 keys.
template <int D>
__device__ __forceinline__ void pv_step(float (&o)[D / 2], const uint32_t (&p)[4], uint64_t desc) {
  if constexpr (D == 128) {
    wgmma_m64n128k16_rs_tb(o, p, desc);
  } else {
    wgmma_m64n64k16_rs_tb(o, p, desc);
  }
}

// s = Q K^T for one warpgroup's 64 rows and a tile of N keys (k-steps of 16 dims).
template <int N>
__device__ __forceinline__ void qk_step(float (&s)[N / 2], uint64_t da, uint64_t db, int scale_d) {
  if constexpr (N == 128) {
    wgmma_m64n128k16_ss(s, da, db, scale_d);
  } else {
    wgmma_m64n64k16_ss(s, da, db, scale_d);
  }
}

template <int D, bool kHeadMajor, int kWarpGroups, int kKeys>
__global__ void __launch_bounds__(128 * kWarpGroups, 1)
    prefill_sm90_kernel(PagedAttentionArgs a, int group, int q_tile, int uniform_tiles,
                        AttentionSplit split, float* part_ml, float* part_acc) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  pdl_wait();
  pdl_trigger();
  using L = Layout<D, kWarpGroups, kKeys>;
  constexpr int kThreads = L::kThreads;
  constexpr int kRows = L::kRows;
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  constexpr int kONb = D / 8;     // n-blocks of 8 columns in O
  constexpr int kSNb = kKeys / 8;
  extern __shared__ unsigned char smem_raw[];
  __shared__ int s_seq, s_tile;
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + 1023) & ~1023u;
  int64_t* const off = reinterpret_cast<int64_t*>(smem_raw + (base - raw) + L::kOff);  // [kStages][kKeys]

  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int wg = tid / 128;
  const int warp_in_wg = (tid / 32) % 4;
  const int g = blockIdx.y;

  if (uniform_tiles > 0) {
    if (tid == 0) {
      s_seq = blockIdx.x % a.num_seqs;
      s_tile = uniform_tiles - 1 - static_cast<int>(blockIdx.x) / a.num_seqs;
    }
  } else if (tid < 32) {
    locate_query_tile(a, q_tile, gridDim.x - 1 - blockIdx.x, &s_seq, &s_tile);
  }
  __syncthreads();
  const int b = s_seq;
  if (b < 0) return;
  const int tile = s_tile;

  const int q_begin = a.query_start_loc[b];
  const int q_len = a.query_start_loc[b + 1] - q_begin;
  const int first = tile * q_tile;
  const int num_tok = min(q_tile, q_len - first);
  const int num_rows = num_tok * group;
  const int pos0 = a.seq_lens[b] - q_len + first;
  const int kv_end = pos0 + num_tok;
  const int z = blockIdx.z;
  int k_begin, k_end;
  split_key_range(split, kv_end, kKeys, z, &k_begin, &k_end);

  for (int i = tid; i < kRows * kChunks; i += kThreads) {
    const int r = i / kChunks;
    const int part = i % kChunks;
    const bool valid = r < num_rows;
    const int64_t tok = q_begin + first + (valid ? r / group : 0);
    const int head = g * group + r % group;
    cp_async_16(base + L::kQ + swizzled_chunk(r, part, L::kQPanel),
                a.q + (tok * a.num_q_heads + head) * D + part * 8, valid);
  }
  cp_async_commit();

  const int32_t* block_table = a.block_tables + int64_t(b) * a.max_blocks_per_seq;
  auto page_of = [&](int key0) {
    const int j = key0 + tid;
    return tid < kKeys && j < k_end ? block_table[j / a.block_size] : -1;
  };
  auto store_offset = [&](int key0, int page, int slot) {
    if (tid < kKeys) {
      const int j = key0 + tid;
      off[slot * kKeys + tid] =
          page < 0 ? -1
                   : kv_row_offset<kHeadMajor>(page, j % a.block_size, g, a.num_kv_heads,
                                               a.block_size, D);
    }
  };
  auto load_tile_from = [&](int slot, int buf) {
    const uint32_t k_dst = base + L::kK + buf * (D / 64) * L::kKvPanel;
    const uint32_t v_dst = base + L::kV + buf * (D / 64) * L::kKvPanel;
#pragma unroll
    for (int i = tid; i < kKeys * kChunks; i += kThreads) {
      const int key = i / kChunks;
      const int part = i % kChunks;
      const int64_t row = off[slot * kKeys + key];
      const bool valid = row >= 0;
      const int64_t src = valid ? row + part * 8 : 0;
      const uint32_t at = swizzled_chunk(key, part, L::kKvPanel);
      cp_async_16(k_dst + at, a.k_cache + src, valid);
      cp_async_16(v_dst + at, a.v_cache + src, valid);
    }
    cp_async_commit();
  };

  // This thread's rows: wg_row0 + 16 warp_in_wg + lane / 4 (+ 8 for h = 1). Rows past
  // num_rows see every key (zero queries; no NaN from an empty row).
  const int wg_row0 = 64 * wg;
  const int row_base = wg_row0 + 16 * warp_in_wg + lane / 4;
  auto row_pos = [&](int h) {
    const int r = row_base + 8 * h;
    return r < num_rows ? pos0 + r / group : kv_end - 1;
  };
  const int wg_first = pos0 + min(wg_row0, num_rows - 1) / group;
  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
  const int wg_last = wg_row0 >= num_rows          ? -1
                      : wg_row0 + 64 <= num_rows ? pos0 + (wg_row0 + 63) / group
                                                 : kv_end - 1;
  float s[kKeys / 2];
#pragma unroll
  for (int i = 0; i < kKeys / 2; ++i) s[i] = 0.0f;
  float m[2] = {-FLT_MAX, -FLT_MAX}, l[2] = {0.0f, 0.0f};
  const float qscale = a.scale * kLog2e;
  const uint32_t q_wg = base + L::kQ + wg_row0 * 128;

  const int num_tiles = k_end > k_begin ? (k_end - k_begin + kKeys - 1) / kKeys : 0;
  store_offset(k_begin, page_of(k_begin), 0);
  store_offset(k_begin + kKeys, page_of(k_begin + kKeys), 1);
  __syncthreads();
  if (num_tiles > 0) {
    load_tile_from(0, 0);
    cp_async_wait<1>();  // Q; tile 0 may stay in flight (the loop waits for it)
  } else {
    cp_async_wait<0>();
  }
  fence_proxy_async_shared();
  __syncthreads();

  for (int it = 0; it < num_tiles; ++it) {
    const int buf = it & 1;
    const int key0 = k_begin + it * kKeys;
    if (it + 1 < num_tiles) {
      load_tile_from(buf ^ 1, buf ^ 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    fence_proxy_async_shared();  // tile `it`'s copies before the tensor cores read them
    __syncthreads();
    // Tile it + 2's pages; their offsets go to off[buf] after the maths (see the barrier
    // at the end of the iteration).
    const int next_page = page_of(key0 + 2 * kKeys);

    if (key0 <= wg_last) {  // warpgroup-uniform
      const uint32_t k_tile = base + L::kK + buf * (D / 64) * L::kKvPanel;
      const uint32_t v_tile = base + L::kV + buf * (D / 64) * L::kKvPanel;
      wgmma_fence_operand(s);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        const uint32_t step = (ks % 4) * 32;  // k-step within the 128-byte line
        const uint64_t da = smem_desc(q_wg + (ks / 4) * L::kQPanel + step, 16, 1024);
        const uint64_t db = smem_desc(k_tile + (ks / 4) * L::kKvPanel + step, 16, 1024);
        qk_step<kKeys>(s, da, db, ks > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operand(s);

      if (key0 + kKeys - 1 > wg_first || key0 + kKeys > k_end) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int last = min(row_pos(h), k_end - 1);
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
        const float corr = exp2_ftz((m[h] - mx) * qscale);
        m[h] = mx;
        const float shift = mx * qscale;
        float sum = 0.0f;
#pragma unroll
        for (int nb = 0; nb < kSNb; ++nb) {
          s[4 * nb + 2 * h] = exp2_ftz(fmaf(s[4 * nb + 2 * h], qscale, -shift));
          s[4 * nb + 2 * h + 1] = exp2_ftz(fmaf(s[4 * nb + 2 * h + 1], qscale, -shift));
          sum += s[4 * nb + 2 * h] + s[4 * nb + 2 * h + 1];
        }
        l[h] = l[h] * corr + sum;
#pragma unroll
        for (int nb = 0; nb < kONb; ++nb) {
          o[4 * nb + 2 * h] *= corr;
          o[4 * nb + 2 * h + 1] *= corr;
        }
      }

      // P in bf16 as the A operand of P V: k16 block kb is n-blocks 2 kb and 2 kb + 1.
      uint32_t p[kKeys / 16][4];
#pragma unroll
      for (int kb = 0; kb < kKeys / 16; ++kb) {
        p[kb][0] = pack_bf16(s[8 * kb + 0], s[8 * kb + 1]);
        p[kb][1] = pack_bf16(s[8 * kb + 2], s[8 * kb + 3]);
        p[kb][2] = pack_bf16(s[8 * kb + 4], s[8 * kb + 5]);
        p[kb][3] = pack_bf16(s[8 * kb + 6], s[8 * kb + 7]);
      }
      wgmma_fence_operand(o);
      wgmma_fence();
#pragma unroll
      for (int kb = 0; kb < kKeys / 16; ++kb) {
        pv_step<D>(o, p[kb], smem_desc(v_tile + kb * 16 * 128, L::kKvPanel, 1024));
      }
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operand(o);
    }
    store_offset(key0 + 2 * kKeys, next_page, buf);
    __syncthreads();  // every warpgroup done with buf before it is refilled
  }
  cp_async_wait<0>();

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = l[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int r = row_base + 8 * h;
    if (r >= num_rows) continue;
    const int64_t row = (q_begin + first + r / group) * int64_t(a.num_q_heads) + g * group + r % group;
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
        part_ml[2 * part] = m[h] * qscale;
        part_ml[2 * part + 1] = sum;
      }
#pragma unroll
      for (int nb = 0; nb < kONb; ++nb) {
        *reinterpret_cast<float2*>(part_acc + part * D + nb * 8 + col) =
            make_float2(o[4 * nb + 2 * h], o[4 * nb + 2 * h + 1]);
      }
    }
  }
#else
  __trap();  // compiled for sm_90a only; the dispatch never launches it elsewhere
#endif
}

template <int D, bool kHeadMajor, int kWarpGroups, int kKeys>
void launch(const PagedAttentionArgs& a, const AttentionSplit& split, float* part_ml,
            float* part_acc, cudaStream_t stream) {
  using L = Layout<D, kWarpGroups, kKeys>;
  const int group = a.num_q_heads / a.num_kv_heads;
  const int q_tile = L::kRows / group;
  const int bytes = static_cast<int>(L::kAlloc);
  auto* kernel = prefill_sm90_kernel<D, kHeadMajor, kWarpGroups, kKeys>;
  allow_dynamic_smem<prefill_sm90_kernel<D, kHeadMajor, kWarpGroups, kKeys>>(bytes);
  const bool uniform = a.num_tokens == int64_t(a.num_seqs) * a.max_query_len;
  const int uniform_tiles = uniform ? (a.max_query_len + q_tile - 1) / q_tile : 0;
  const int64_t ctas_x = uniform ? int64_t(a.num_seqs) * uniform_tiles
                                 : (a.num_tokens + q_tile - 1) / q_tile + a.num_seqs;
  const dim3 grid(static_cast<unsigned>(ctas_x), static_cast<unsigned>(a.num_kv_heads),
                  static_cast<unsigned>(split.num_splits));
  launch_pdl("attention prefill_sm90_kernel", kernel, grid, L::kThreads, bytes, stream, a, group,
             q_tile, uniform_tiles, split, part_ml, part_acc);
  KS_CUDA_CHECK_LAUNCH("attention prefill_sm90_kernel");
}

// The geometry shipped, from the variants measured (docs/cuda_backend.md, "wgmma prefill
// attention"): 2 warpgroups (128 rows) and 128-key tiles.
constexpr int kShippedWarpGroups = 2;
constexpr int kShippedKeys = 128;

template <int D>
void launch_layout(const PagedAttentionArgs& a, const AttentionSplit& split, float* part_ml,
                   float* part_acc, cudaStream_t stream) {
  constexpr int W = kShippedWarpGroups, N = kShippedKeys;
  if (a.kv_head_major) return launch<D, true, W, N>(a, split, part_ml, part_acc, stream);
  launch<D, false, W, N>(a, split, part_ml, part_acc, stream);
}

}  // namespace

void prefill_attention_sm90(const PagedAttentionArgs& a, const AttentionSplit& split,
                            float* part_ml, float* part_acc, cudaStream_t stream) {
  switch (a.head_dim) {
    case 64:
      launch_layout<64>(a, split, part_ml, part_acc, stream);
      break;
    case 128:
      launch_layout<128>(a, split, part_ml, part_acc, stream);
      break;
    default:
      KS_CUDA_CHECK(cudaErrorInvalidValue);  // use_prefill_kernel() said no
  }
}

}  // namespace kestrel::kernels::detail
