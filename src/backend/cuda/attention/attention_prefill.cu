// Paged attention for batches with prefill rows, on the tensor cores (FlashAttention-2 style).
//
// Maths as in attention.cu: for query token t of sequence b at position
// pos = seq_len - query_len + i and query head h reading KV head g = h / G,
//   out[t, h] = sum_{j <= pos} softmax_j(scale q[t, h] . K[b, j, g]) V[b, j, g],
// bf16 inputs, fp32 accumulation, bf16 output. Rounding points: S = Q K^T in fp32 from bf16
// products (exact); softmax in fp32, log2 domain (scale * log2(e) folded into the exponent's
// FMA, ex2.approx); P rounded once to bf16 for the P V product, as FlashAttention does
// (relative error <= 2^-9 per weight: the attention test's tolerance carries that bound);
// row sums from the fp32 P.
//
// Geometry. A CTA of 4 warps owns kRows = 128 rows of one (sequence, KV head, query tile):
// the rows are the (token, head) pairs of q_tile = 128 / G tokens times the G query heads of
// the group (row r: token r / G, head g G + r % G), so every K/V byte loaded serves the whole
// group. Warp w owns the 32 rows [32 w, 32 w + 32), two m16 tiles of mma.sync m16n8k16, so
// each K and V fragment that ldmatrix brings in feeds four mmas; with one m16 tile per warp
// the kernel was bound by shared-memory traffic and latency, not by the tensor cores
// (docs/cuda_backend.md has the measurements).
// - Q [128, D] is staged through shared memory once and re-read as A fragments (ldmatrix)
//   per k-step: its fragments would not fit in registers beside O.
// - Keys stream in tiles of kKeys = 64 (K and V [64, D] each), double-buffered with cp.async
//   (16-byte copies, zero-filled past the CTA's last key). Each key row's offset (block
//   table, division by the block size, 64-bit address) is found once, by one thread, two
//   tiles ahead, into shared memory, not by each of the row's D / 8 copying threads. Rows are
//   padded by 16 bytes so that ldmatrix's eight row addresses fall in distinct bank groups.
// - S [32, 64] per warp = Q K^T: ldmatrix (K rows are the B operand's columns), fp32 acc.
// - Online softmax in registers: each thread holds rows lane / 4 and lane / 4 + 8 of each
//   m16 tile; the row max is reduced over the quad (xor 1, 2); the row sum stays per thread
//   until the end.
// - O [32, D] per warp += P V: the S accumulators become the A fragments of P directly (bf16
//   pairs), V comes through ldmatrix.trans.
// - Causal mask only on the tiles that reach past the warp's first position (or past the
//   CTA's last key): key j is visible to the row at position pos when j <= pos. A warp skips
//   the key tiles past its last row's position.
// Shared memory: Q + 2 stages of K and V = (128 + 4 x 64) x (D + 8) bf16, plus 1 KB of row
// offsets = 103 KB at D = 128, so two CTAs per SM on sm_80/sm_90; 255 registers at D = 128
// (about 100 bytes spilled).
//
// fp8 cache (kFp8; kernels.h, KvQuant): each tile's e4m3 rows are copied (cp.async, 16 bytes
// = 16 dims) into the second K and V buffers, which serve as staging, and turned into the
// first buffers' bf16 rows (x scale, exact) by the CTA before the maths; the copy of the next
// tile then overlaps the maths on this one, as the two bf16 buffers do.
//
// Work lookup and key splits as in attention.cu: grid.x = ceil(T / q_tile) + B bounds the
// (sequence, tile) pairs, found by a warp prefix scan over query_start_loc, taken in reverse
// so that the longest (last) tiles of each sequence start first. When every sequence has
// max_query_len new tokens (num_tokens = B max_query_len, known on the host), grid.x is
// B x tiles and CTAs map to tiles directly, the longest tiles of all sequences first. grid.z
// splits each tile's keys into chunks of whole 64-key tiles (kernels.h, AttentionSplit),
// merged by attention.cu.
#include <cfloat>
#include <cstdlib>
#include <string_view>
#include <type_traits>

#include "backend/cuda/attention/attention_decode.cuh"
#include "backend/cuda/attention/attention_prefill.cuh"
#include "backend/cuda/attention/attention_tiles.cuh"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/attention/kv_fp8.cuh"
#include "backend/cuda/attention/kv_layout.cuh"

namespace kestrel::kernels::detail {
namespace {

// Off switch: false routes every batch back to attention.cu's CUDA-core kernel.
constexpr bool kPrefillKernelEnabled = true;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kMt = 2;                      // m16 tiles of rows per warp
constexpr int kWarpRows = 16 * kMt;         // rows per warp, contiguous
constexpr int kRows = kWarps * kWarpRows;   // (token, head) rows per CTA
constexpr int kKeys = 64;                   // keys per tile
constexpr int kPad = 8;                     // bf16 of padding per shared-memory row
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
struct alignas(16) PrefillSmem {
  bf16 q[kRows][D + kPad];
  bf16 k[2][kKeys][D + kPad];
  bf16 v[2][kKeys][D + kPad];
  int64_t off[2][kKeys];  // element offsets of two tiles' key rows in the cache (-1: none)
};

// mma.cuh's product with A as one fragment array.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const unsigned (&a)[4], unsigned b0,
                                         unsigned b1) {
  kernels::mma_bf16(c, a[0], a[1], a[2], a[3], b0, b1);
}

template <int D, bool kHeadMajor, bool kFp8>
__global__ void __launch_bounds__(kThreads, 2)
    prefill_kernel(PagedAttentionArgs a, int group, int q_tile, int uniform_tiles,
                   AttentionSplit split, float* part_ml, float* part_acc) {
  pdl_wait();  // launch.cuh: before touching what earlier kernels write
  pdl_trigger();
  constexpr int kChunks = D / 8;   // 16-byte chunks per row
  constexpr int kDSteps = D / 16;  // k-steps of Q K^T
  constexpr int kONb = D / 8;      // n-blocks of O
  constexpr int kSNb = kKeys / 8;  // n-blocks of S
  extern __shared__ __align__(16) unsigned char smem_raw[];
  PrefillSmem<D>& sm = *reinterpret_cast<PrefillSmem<D>*>(smem_raw);
  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int warp = tid / 32;
  // Uniform batches: CTA x takes the (x / B)-th tile from the end of sequence x % B, so all
  // sequences' longest tiles start first (attention_tiles.cuh).
  const PrefillWork w = find_prefill_work(a, group, q_tile, uniform_tiles, split, kKeys);
  if (w.b < 0) return;
  const int b = w.b, g = w.g, q_begin = w.q_begin, first = w.first, num_rows = w.num_rows;
  const int pos0 = w.pos0, kv_end = w.kv_end, k_begin = w.k_begin, k_end = w.k_end;
  const int z = blockIdx.z;  // key split

  // Q rows; rows past num_rows are zeros (their results are dropped).
  for (int i = tid; i < kRows * kChunks; i += kThreads) {
    const int r = i / kChunks;
    const int part = i % kChunks;
    const bool valid = r < num_rows;
    const int64_t tok = q_begin + first + (valid ? r / group : 0);
    const int head = g * group + r % group;
    cp_async_16(&sm.q[r][part * 8], a.q + (tok * a.num_q_heads + head) * D + part * 8, valid);
  }
  cp_async_commit();

  const int32_t* block_table = a.block_tables + int64_t(b) * a.max_blocks_per_seq;
  // The offsets of tile `key0`'s keys go to off[slot], one key per thread of [0, kKeys); the
  // page is fetched first (page_of) and turned into an offset later (store_offset), so the
  // block table's latency hides behind a tile of maths.
  auto page_of = [&](int key0) {
    const int j = key0 + tid;
    return tid < kKeys && j < k_end ? block_table[j / a.block_size] : -1;
  };
  auto store_offset = [&](int key0, int page, int slot) {
    if (tid < kKeys) {
      const int j = key0 + tid;
      sm.off[slot][tid] = page < 0 ? -1
                                   : kv_row_offset<kHeadMajor>(page, j % a.block_size, g,
                                                               a.num_kv_heads, a.block_size, D);
    }
  };
  // The tile of off[slot] into shared rows k_dst + key k_pitch, v_dst + key v_pitch (in
  // elements of the cache's type E), in 16-byte pieces (8 bf16 or 16 e4m3 dims), zeros for
  // keys without a row.
  auto copy_tile = [&](int slot, auto* k_dst, int k_pitch, auto* v_dst, int v_pitch) {
    using E = std::remove_pointer_t<decltype(k_dst)>;
    constexpr int kPer = 16 / int(sizeof(E));  // elements per piece
    constexpr int kPieces = D / kPer;          // pieces per row
    const int part = tid % kPieces;
#pragma unroll
    for (int n = 0; n < kKeys * kPieces / kThreads; ++n) {
      const int key = tid / kPieces + n * (kThreads / kPieces);
      const int64_t row = sm.off[slot][key];
      const bool valid = row >= 0;
      const int64_t off = valid ? row + part * kPer : 0;
      cp_async_16(k_dst + key * k_pitch + part * kPer, static_cast<const E*>(a.k_cache) + off, valid);
      cp_async_16(v_dst + key * v_pitch + part * kPer, static_cast<const E*>(a.v_cache) + off, valid);
    }
    cp_async_commit();
  };
  auto load_tile_from = [&](int slot, int buf) {
    copy_tile(slot, &sm.k[buf][0][0], D + kPad, &sm.v[buf][0][0], D + kPad);
  };
  // fp8: the e4m3 tile of off[slot] into the staging buffers (K and V [kKeys][D] bytes in
  // k[1] and v[1]), and from there into k[0] and v[0] as bf16.
  auto* const stage_k = reinterpret_cast<uint8_t*>(&sm.k[1][0][0]);
  auto* const stage_v = reinterpret_cast<uint8_t*>(&sm.v[1][0][0]);
  auto stage_tile = [&](int slot) { copy_tile(slot, stage_k, D, stage_v, D); };
  float k_scale = 1.0f, v_scale = 1.0f;
  if constexpr (kFp8) {
    k_scale = a.kv.scale[g];
    v_scale = a.kv.scale[a.num_kv_heads + g];
  }
  auto unstage_tile = [&] {
    fp8_tile_to_bf16<kKeys, D, kThreads>(stage_k, &sm.k[0][0][0], D + kPad, k_scale, tid);
    fp8_tile_to_bf16<kKeys, D, kThreads>(stage_v, &sm.v[0][0][0], D + kPad, v_scale, tid);
  };

  // This thread's rows: (mt, h) is row warp_row0 + 16 mt + lane / 4 + 8 h, at position
  // row_pos (found only on masked tiles, to spare registers). Rows past num_rows see every
  // key (zero queries; no NaN from an empty row).
  const int warp_row0 = kWarpRows * warp;
  auto row_pos = [&](int mt, int h) {
    const int r = warp_row0 + 16 * mt + lane / 4 + 8 * h;
    return r < num_rows ? pos0 + r / group : kv_end - 1;
  };
  // The warp's rows see keys up to warp_last (a key tile past it is skipped: fully masked
  // for every row of the warp) and all keys up to warp_first without a mask.
  const int warp_first = pos0 + min(warp_row0, num_rows - 1) / group;
  const int warp_last = warp_row0 >= num_rows ? -1  // no rows: nothing to compute
                        : warp_row0 + kWarpRows <= num_rows ? pos0 + (warp_row0 + kWarpRows - 1) / group
                                                            : kv_end - 1;
  float o[kMt][kONb][4];
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
    for (int nb = 0; nb < kONb; ++nb) o[mt][nb][0] = o[mt][nb][1] = o[mt][nb][2] = o[mt][nb][3] = 0.0f;
  }
  // Row max in raw score units (the scale folds into the exponent's FMA), row sums per thread.
  float m[kMt][2], l[kMt][2];
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
    m[mt][0] = m[mt][1] = -FLT_MAX;
    l[mt][0] = l[mt][1] = 0.0f;
  }
  const float qscale = a.scale * kLog2e;

  const int num_tiles = k_end > k_begin ? (k_end - k_begin + kKeys - 1) / kKeys : 0;
  store_offset(k_begin, page_of(k_begin), 0);
  store_offset(k_begin + kKeys, page_of(k_begin + kKeys), 1);
  __syncthreads();
  if (kFp8) {
    if (num_tiles > 0) stage_tile(0);
    cp_async_wait<0>();  // Q and tile 0's bytes
  } else if (num_tiles > 0) {
    load_tile_from(0, 0);
    cp_async_wait<1>();  // Q; tile 0 may stay in flight (the loop waits for it)
  } else {
    cp_async_wait<0>();
  }
  __syncthreads();

  for (int it = 0; it < num_tiles; ++it) {
    const int slot = it & 1;        // off[] of this tile
    const int buf = kFp8 ? 0 : slot;  // its bf16 rows
    const int key0 = k_begin + it * kKeys;
    if constexpr (kFp8) {
      unstage_tile();   // bytes landed (waited for at the end of the last turn)
      __syncthreads();  // bf16 tile visible, staging free
      if (it + 1 < num_tiles) stage_tile(slot ^ 1);
    } else {
      if (it + 1 < num_tiles) {
        load_tile_from(slot ^ 1, buf ^ 1);
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();  // tile `it` visible to every warp
    }
    // Tile it + 2's pages; their offsets go to off[buf] (tile it's, read by the loads issued
    // before the barrier above) after the maths.
    const int next_page = page_of(key0 + 2 * kKeys);

    if (key0 <= warp_last) {  // warp-uniform
      float s[kMt][kSNb][4];
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
        for (int nb = 0; nb < kSNb; ++nb) s[mt][nb][0] = s[mt][nb][1] = s[mt][nb][2] = s[mt][nb][3] = 0.0f;
      }
#pragma unroll
      for (int ks = 0; ks < kDSteps; ++ks) {
        unsigned qa[kMt][4];
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) {
          ldmatrix_x4(qa[mt], &sm.q[warp_row0 + 16 * mt + lane % 16][ks * 16 + (lane / 16) * 8]);
        }
#pragma unroll
        for (int kb = 0; kb < kKeys / 16; ++kb) {
          // Matrices: keys [0, 8) dims [0, 8), keys [0, 8) dims [8, 16), then keys [8, 16).
          unsigned kf[4];
          ldmatrix_x4(kf,
                      &sm.k[buf][kb * 16 + lane % 8 + (lane / 16) * 8][ks * 16 + ((lane / 8) % 2) * 8]);
#pragma unroll
          for (int mt = 0; mt < kMt; ++mt) {
            mma_bf16(s[mt][2 * kb], qa[mt], kf[0], kf[1]);
            mma_bf16(s[mt][2 * kb + 1], qa[mt], kf[2], kf[3]);
          }
        }
      }

      if (key0 + kKeys - 1 > warp_first || key0 + kKeys > k_end) {
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int last = min(row_pos(mt, h), k_end - 1);  // the row's last visible key
#pragma unroll
            for (int nb = 0; nb < kSNb; ++nb) {
#pragma unroll
              for (int c = 2 * h; c < 2 * h + 2; ++c) {
                if (key0 + nb * 8 + 2 * (lane % 4) + (c & 1) > last) s[mt][nb][c] = -INFINITY;
              }
            }
          }
        }
      }

      // Online softmax. A row with no visible key yet keeps m = -FLT_MAX: p = 2^-inf = 0.
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float mx = m[mt][h];
#pragma unroll
          for (int nb = 0; nb < kSNb; ++nb) {
            mx = fmaxf(mx, fmaxf(s[mt][nb][2 * h], s[mt][nb][2 * h + 1]));
          }
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float corr = exp2_ftz((m[mt][h] - mx) * qscale);
          m[mt][h] = mx;
          const float shift = mx * qscale;
          float sum = 0.0f;
#pragma unroll
          for (int nb = 0; nb < kSNb; ++nb) {
            s[mt][nb][2 * h] = exp2_ftz(fmaf(s[mt][nb][2 * h], qscale, -shift));
            s[mt][nb][2 * h + 1] = exp2_ftz(fmaf(s[mt][nb][2 * h + 1], qscale, -shift));
            sum += s[mt][nb][2 * h] + s[mt][nb][2 * h + 1];
          }
          l[mt][h] = l[mt][h] * corr + sum;
#pragma unroll
          for (int nb = 0; nb < kONb; ++nb) {
            o[mt][nb][2 * h] *= corr;
            o[mt][nb][2 * h + 1] *= corr;
          }
        }
      }

#pragma unroll
      for (int kb = 0; kb < kKeys / 16; ++kb) {
        // The S accumulators of keys [16 kb, 16 kb + 16) are the A fragments of P.
        unsigned pf[kMt][4];
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) {
          pf[mt][0] = pack_bf16(s[mt][2 * kb][0], s[mt][2 * kb][1]);
          pf[mt][1] = pack_bf16(s[mt][2 * kb][2], s[mt][2 * kb][3]);
          pf[mt][2] = pack_bf16(s[mt][2 * kb + 1][0], s[mt][2 * kb + 1][1]);
          pf[mt][3] = pack_bf16(s[mt][2 * kb + 1][2], s[mt][2 * kb + 1][3]);
        }
#pragma unroll
        for (int db = 0; db < D / 16; ++db) {
          // Matrices: keys [0, 8) dims [0, 8), keys [8, 16) dims [0, 8), then dims [8, 16).
          unsigned vf[4];
          ldmatrix_x4_trans(
              vf, &sm.v[buf][kb * 16 + lane % 8 + ((lane / 8) % 2) * 8][db * 16 + (lane / 16) * 8]);
#pragma unroll
          for (int mt = 0; mt < kMt; ++mt) {
            mma_bf16(o[mt][2 * db], pf[mt], vf[0], vf[1]);
            mma_bf16(o[mt][2 * db + 1], pf[mt], vf[2], vf[3]);
          }
        }
      }
    }
    store_offset(key0 + 2 * kKeys, next_page, slot);
    if (kFp8) cp_async_wait<0>();  // the next tile's bytes, visible after the barrier
    __syncthreads();  // every warp done with buf before it is refilled
  }
  cp_async_wait<0>();

#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float sum = l[mt][h];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int r = warp_row0 + 16 * mt + lane / 4 + 8 * h;
      if (r >= num_rows) continue;
      const int64_t row =
          (q_begin + first + r / group) * int64_t(a.num_q_heads) + g * group + r % group;
      const int col = 2 * (lane % 4);
      if (part_acc == nullptr) {
        const float inv = 1.0f / sum;
#pragma unroll
        for (int nb = 0; nb < kONb; ++nb) {
          *reinterpret_cast<__nv_bfloat162*>(a.out + row * D + nb * 8 + col) =
              __floats2bfloat162_rn(o[mt][nb][2 * h] * inv, o[mt][nb][2 * h + 1] * inv);
        }
      } else {
        const int64_t part = int64_t(z) * a.num_tokens * a.num_q_heads + row;
        if (lane % 4 == 0) {
          part_ml[2 * part] = m[mt][h] * qscale;  // the merge works in the log2 domain
          part_ml[2 * part + 1] = sum;
        }
#pragma unroll
        for (int nb = 0; nb < kONb; ++nb) {
          *reinterpret_cast<float2*>(part_acc + part * D + nb * 8 + col) =
              make_float2(o[mt][nb][2 * h], o[mt][nb][2 * h + 1]);
        }
      }
    }
  }
}

template <int D, bool kHeadMajor, bool kFp8>
void launch(const PagedAttentionArgs& a, const AttentionSplit& split, float* part_ml,
            float* part_acc, cudaStream_t stream) {
  const int group = a.num_q_heads / a.num_kv_heads;
  const int q_tile = kRows / group;
  const int bytes = static_cast<int>(sizeof(PrefillSmem<D>));
  allow_dynamic_smem<prefill_kernel<D, kHeadMajor, kFp8>>(bytes);
  // Batches whose sequences all have max_query_len new tokens take their tiles longest first
  // across sequences, with no lookup scan (the prefill workload: 5% faster than the scan's
  // order, docs/cuda_backend.md).
  int uniform_tiles;
  const dim3 grid = prefill_grid(a, split, q_tile, &uniform_tiles);
  launch_pdl("attention prefill_kernel", prefill_kernel<D, kHeadMajor, kFp8>, grid, kThreads, bytes,
             stream, a, group, q_tile, uniform_tiles, split, part_ml, part_acc);
  KS_CUDA_CHECK_LAUNCH("attention prefill_kernel");
}

template <int D>
void launch_layout(const PagedAttentionArgs& a, const AttentionSplit& split, float* part_ml,
                   float* part_acc, cudaStream_t stream) {
  if (a.kv.fp8) {
    if (a.kv_head_major) return launch<D, true, true>(a, split, part_ml, part_acc, stream);
    return launch<D, false, true>(a, split, part_ml, part_acc, stream);
  }
  if (a.kv_head_major) return launch<D, true, false>(a, split, part_ml, part_acc, stream);
  launch<D, false, false>(a, split, part_ml, part_acc, stream);
}

}  // namespace

dim3 prefill_grid(const PagedAttentionArgs& a, const AttentionSplit& split, int q_tile,
                  int* uniform_tiles) {
  const bool uniform = a.num_tokens == int64_t(a.num_seqs) * a.max_query_len;
  *uniform_tiles = uniform ? (a.max_query_len + q_tile - 1) / q_tile : 0;
  const int64_t ctas_x = uniform ? int64_t(a.num_seqs) * *uniform_tiles
                                 : (a.num_tokens + q_tile - 1) / q_tile + a.num_seqs;
  return dim3(static_cast<unsigned>(ctas_x), static_cast<unsigned>(a.num_kv_heads),
              static_cast<unsigned>(split.num_splits));
}

bool use_prefill_kernel(const PagedAttentionArgs& a) {
  return kPrefillKernelEnabled && a.max_query_len > 1 && !use_decode_kernel(a) &&
         (a.head_dim == 64 || a.head_dim == 128) && a.num_q_heads % a.num_kv_heads == 0 &&
         a.num_q_heads / a.num_kv_heads <= kMaxAttentionGroup;
}

PrefillSm90 prefill_sm90_kernel() {
  if (compute_capability() != 90) return PrefillSm90::kNone;  // sm_90a code runs on 9.0 alone
  const char* env = std::getenv("KESTREL_PREFILL_SM90");
  const std::string_view v = env == nullptr ? "" : env;
  if (v == "0") return PrefillSm90::kNone;
  if (v == "step") return PrefillSm90::kInStep;
  return PrefillSm90::kWarpSpecialized;
}

void prefill_attention(const PagedAttentionArgs& a, const AttentionSplit& split, float* part_ml,
                       float* part_acc, cudaStream_t stream) {
  // The wgmma kernels read bf16 caches only; fp8 ones take the mma.sync kernel.
  if (!a.kv.fp8) {
    switch (prefill_sm90_kernel()) {
      case PrefillSm90::kInStep:
        return prefill_attention_sm90(a, split, part_ml, part_acc, stream);
      case PrefillSm90::kWarpSpecialized:
        return prefill_attention_sm90_ws(a, split, part_ml, part_acc, stream);
      case PrefillSm90::kNone:
        break;
    }
  }
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
