// The tensor-core decode kernel's body, shared by its two translation units:
// attention_decode_mma.cu (the plain kernel) and attention_decode_mma_rope.cu (the kernel with
// qk_norm_rope_store fused in), so that a 2-core machine compiles the two sets of
// instantiations side by side. Included by those two files only.
//
// Decode attention on the tensor cores, over an fp8 (e4m3) or a bf16 cache.
//
// Maths as in attention.cu, for one query token per sequence: out[b, h] = sum_j softmax_j(
// scale q[b, h] . K[b, j, g]) V[b, j, g], g = h / G, K and V the cache's values (fp8: the
// bytes' values x their (K or V, KV head) scale, kernels.h KvQuant), fp32 accumulation, bf16
// output.
//
// Why: the CUDA-core decode kernel (attention_decode.cu) is bound by instruction issue, not
// by bytes: every element of K and V costs an FMA per query row of the group (plus, for fp8,
// its conversion), so halving the bytes (e4m3) left its time unchanged, and bf16 batches of
// mixed lengths ran at ~60% of the copy rate (docs/cuda_backend.md). Here the group's query
// heads are the rows of an m16n8k16 tile (G <= 16 rows, the rest zero), so the FMAs go to the
// tensor cores and an element costs its load (and conversion) alone.
// - fp8: e4m3 pairs convert to f16 pairs in one instruction (exactly: f16 holds every e4m3
//   value), so the products are f16 x f16, q rounded from bf16 to f16 once, P in f16.
// - bf16: the products are bf16 x bf16 (exact in fp32), K and V fragments come through
//   ldmatrix as in the prefill kernel, and P goes as two bf16 parts (16 significant bits).
//
// Geometry. A CTA of 4 warps owns (KV head, sequence, key split), heads fastest in the grid;
// warp w takes the CTA's 16-key tiles w, w + 4, ... with its own online softmax over all 16
// rows, and the four states are merged through shared memory at the end.
// - Each warp streams its tiles through its own ring of kStages tiles in shared memory
//   (cp.async, 16-byte copies; kStages - 1 tiles in flight), so the key loop
//   synchronises the warp only (__syncwarp), never the CTA. A tile that starts a page (16-key
//   tiles, pages of a multiple of 16) finds its page once, from a block-table entry each lane
//   loaded ahead, and its rows at a fixed stride from there.
// - S [16 rows, 16 keys] = Q K^T: Q's fragments stay in registers for the whole loop. fp8:
//   K's come straight from the e4m3 rows. The head dims are permuted (the same way for Q, which
//   a dot product does not notice) so that lane column c reads its fragments of all k-steps
//   as one run of D / 4 bytes per key row (16-byte reads), two conversions per 4 bytes.
// - O [16, D] += P V: fp8: P is the S accumulators rounded to f16 (P <= 1: 11 significant
//   bits). V's B fragments hold two keys of one dim; O's columns are permuted so that a
//   lane's dims are one run of D / 8 bytes per key row: it reads rows 2c, 2c + 1 (and 2c + 8,
//   2c + 9), interleaves their bytes (prmt) and converts, with no pass through shared memory.
// - O is rescaled only when a row's running maximum moved (after the first tiles, rarely).
// - K's scale folds into the exponent's scale and V's into the output (powers of two: exact).
// What each of these gave: docs/cuda_backend.md, "Tensor-core decode attention".
//
// Splits (Flash-Decoding, kernels.h AttentionSplit; plan_attention_split fills one wave of
// decode_mma_ctas_per_sm CTAs per SM): with num_splits > 1 every CTA writes its rows' partials
// (log2-domain max, sum, unnormalised output; empty splits write empty ones) and
// attention.cu's merge kernel combines them.
#pragma once

#include <cfloat>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "backend/cuda/attention/attention_decode.cuh"
#include "backend/cuda/attention/attention_decode_rope.cuh"
#include "backend/cuda/attention/attention_tiles.cuh"
#include "backend/cuda/attention/kv_fp8.cuh"
#include "backend/cuda/attention/kv_layout.cuh"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/mma.cuh"

namespace kestrel::kernels::detail {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kKeys = 16;   // keys per warp tile
constexpr float kLog2e = 1.4426950408889634f;

// Per cache type: row strides in bytes, padded where fragment reads would hit one bank. fp8:
// K is read 16 bytes per lane (D / 4 bytes per quad column), V 16 or 8 bytes at rows 2c,
// 2c + 1, ...; bf16: ldmatrix's eight rows of 16 bytes, 16 bytes apart in the banks.
template <int D, bool kFp8>
struct Tile {
  static constexpr int kRowBytes = kFp8 ? D : 2 * D;
  static constexpr int kKStride = kFp8 && D == 64 ? D : kRowBytes + 16;
  static constexpr int kVStride = kRowBytes + 16;
};

// A warp's ring of kStages tiles (kStages - 1 in flight while it works on one).
template <int D, bool kFp8, int kStages>
struct alignas(16) WarpRing {
  using T = Tile<D, kFp8>;
  uint8_t k[kStages][kKeys][T::kKStride];
  uint8_t v[kStages][kKeys][T::kVStride];
};

// Tiles in a warp's ring: fp8 4; bf16 2 or 3, chosen per batch (bf16_ring_tiles).
constexpr int kFp8Stages = 4;

// CTAs resident per SM: three (the register limit, 168 a thread), or as many rings as fit in
// Hopper's 228 KB an SM with 1 KB of it reserved per CTA. bf16 at D = 128 with three stages:
// 102 KB a CTA, two per SM.
template <int D, bool kFp8, int kStages>
constexpr int ctas_per_sm() {
  constexpr int kFit = 228 * 1024 / (int(sizeof(WarpRing<D, kFp8, kStages>)) * kWarps + 1024);
  return kFit < 3 ? kFit : 3;
}

template <int D>
struct MergeSmem {  // reuses the rings once every warp is done; o in fragment order
  float o[kWarps][D / 2][32];
  float m[kWarps][16];
  float l[kWarps][16];
};

// The new token's K and V rows as the cache holds them (the fused kernel's, after the rings).
template <int D, bool kFp8>
struct NewKv {
  uint8_t k[Tile<D, kFp8>::kRowBytes];
  uint8_t v[Tile<D, kFp8>::kRowBytes];
};

// The fused kernel's copy of the new token's rope inputs, made before the wait: its cos/sin
// row and the q and k norm weights (after NewKv).
template <int D>
struct RopeSmem {
  float cos_sin[D];
  bf16 q_norm[D];
  bf16 k_norm[D];
};

// Query heads per KV head the fused kernel takes: as many q rows (bf16, after NewKv and
// RopeSmem) as fit beside the rings at ctas_per_sm() CTAs per SM, at most 16. fp8 at
// D = 128: 7.
template <int D, bool kFp8, int kStages>
constexpr int fused_max_group() {
  constexpr int kBudget = 228 * 1024 / ctas_per_sm<D, kFp8, kStages>() - 1024;
  constexpr int kFixed = int(sizeof(WarpRing<D, kFp8, kStages>)) * kWarps + int(sizeof(NewKv<D, kFp8>)) +
                         int(sizeof(RopeSmem<D>));
  return (kBudget - kFixed) / (2 * D) < 16 ? (kBudget - kFixed) / (2 * D) : 16;
}

template <int D, bool kFp8, bool kFused, int kStages>
constexpr int smem_bytes() {
  const int ring = int(sizeof(WarpRing<D, kFp8, kStages>)) * kWarps +
                   (kFused ? int(sizeof(NewKv<D, kFp8>) + sizeof(RopeSmem<D>)) +
                                 2 * D * fused_max_group<D, kFp8, kStages>()
                           : 0);
  const int merge = int(sizeof(MergeSmem<D>));
  return ring > merge ? ring : merge;
}

// Four e4m3 bytes (lowest first) as two f16 pairs: bytes 0, 1 in *lo, bytes 2, 3 in *hi.
// Exact: f16 holds every e4m3 value. Before sm_89 (no e4m3 cvt) the intrinsic's emulation.
__device__ __forceinline__ void fp8x4_to_f16x2x2(uint32_t four, uint32_t* lo, uint32_t* hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm("{\n .reg .b16 a, b;\n mov.b32 {a, b}, %2;\n cvt.rn.f16x2.e4m3x2 %0, a;\n"
      " cvt.rn.f16x2.e4m3x2 %1, b;\n}\n"
      : "=r"(*lo), "=r"(*hi)
      : "r"(four));
#else
  const __half2_raw a = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(four & 0xffffu), __NV_E4M3);
  const __half2_raw b = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(four >> 16), __NV_E4M3);
  *lo = uint32_t(a.x) | (uint32_t(a.y) << 16);
  *hi = uint32_t(b.x) | (uint32_t(b.y) << 16);
#endif
}

// Two floats (low first) as a bf16 pair rounded to nearest, and the pair of what that left.
__device__ __forceinline__ void float2_to_bf16x2_split(float x, float y, uint32_t* hi, uint32_t* lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
  const float2 back = __bfloat1622float2(h);
  const __nv_bfloat162 r = __floats2bfloat162_rn(x - back.x, y - back.y);
  *hi = *reinterpret_cast<const uint32_t*>(&h);
  *lo = *reinterpret_cast<const uint32_t*>(&r);
}

// Two bf16 values (low first) as an f16 pair.
__device__ __forceinline__ uint32_t bf16x2_to_f16x2(uint32_t two) {
  const __half2 h = __floats2half2_rn(__uint_as_float(two << 16), __uint_as_float(two & 0xffff0000u));
  return *reinterpret_cast<const uint32_t*>(&h);
}

template <int N>
__device__ __forceinline__ void load_words(uint32_t (&w)[N], const uint8_t* p) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      const uint4 u = reinterpret_cast<const uint4*>(p)[i];
      w[4 * i] = u.x, w[4 * i + 1] = u.y, w[4 * i + 2] = u.z, w[4 * i + 3] = u.w;
    }
  } else {
    static_assert(N == 2);
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    w[0] = u.x, w[1] = u.y;
  }
}

// Head dim of column n of O's n-block j (see the fp8 permutation above; bf16 keeps the order).
template <int D, bool kFp8>
__device__ __forceinline__ int o_dim(int j, int n) {
  return kFp8 ? n * (D / 8) + j : j * 8 + n;
}

// Thread tid's part of the RopeSmem copy for the token at position pos (16 bytes each, for
// the first D / 2 threads; a norm without weights is skipped).
template <int D>
__device__ __forceinline__ void copy_rope_inputs(RopeSmem<D>& rs, const QkNormRopeArgs& rope,
                                                 int pos, int tid) {
  constexpr int kCs = D / 4, kNorm = D / 8;  // 16-byte pieces
  if (tid < kCs) {
    cp_async_16(&rs.cos_sin[4 * tid], rope.cos_sin + int64_t(pos) * D + 4 * tid, true);
  } else if (tid < kCs + kNorm) {
    if (rope.q_norm != nullptr) cp_async_16(&rs.q_norm[8 * (tid - kCs)], rope.q_norm + 8 * (tid - kCs), true);
  } else if (tid < kCs + 2 * kNorm) {
    if (rope.k_norm != nullptr) cp_async_16(&rs.k_norm[8 * (tid - kCs - kNorm)], rope.k_norm + 8 * (tid - kCs - kNorm), true);
  }
}

// The fused kernel's work after the wait, by all its threads in norm_rope8's layout (8 dims
// per thread, D / 8 threads a head, kThreads * 8 / D heads a pass): the group's q heads,
// normed and rotated, into qs (bf16, [group][D]); when the CTA owns the new token, its K
// (normed, rotated) and V rows as the cache holds them into nk and, at `slot` (none for -1,
// as the store kernel), into the cache. The maths is qk_norm_rope_store's (norm_rope8),
// so the bits are the same. Ends with the CTA synchronised (qs and nk visible).
template <int D, bool kHeadMajor, bool kFp8, int kStages>
__device__ __forceinline__ void rope_prologue(bf16* qs, NewKv<D, kFp8>& nk, const RopeSmem<D>& rs,
                                              const QkNormRopeArgs& rope, int token, int g,
                                              int group, bool owns_new, int slot, int tid) {
  constexpr int kLanes = D / 8, kRowsPerPass = kThreads / kLanes;
  const int sub = tid % kLanes;
  const int rows = group + (owns_new ? 2 : 0);  // the q heads, then K, then V
  const int64_t qkv_heads = int64_t(token) * (rope.num_q_heads + 2 * rope.num_kv_heads);
  // Pass p's row of this thread; threads past the rows repeat the last (they shuffle with
  // their warp and store nothing).
  auto head_of = [&](int p) {
    const int r = min(p * kRowsPerPass + tid / kLanes, rows - 1);
    return r < group ? g * group + r : rope.num_q_heads + (r == group + 1 ? rope.num_kv_heads : 0) + g;
  };
  auto load = [&](int p) {
    return *reinterpret_cast<const uint4*>(rope.qkv + (qkv_heads + head_of(p)) * D + sub * 8);
  };
  uint4 raw = load(0);
  cp_async_wait<kStages - 1>();  // the rope inputs' group (the oldest)
  __syncthreads();                              // every thread's part of it visible
  RopeRow rr;
  rr.load_from<kLanes>(rs.cos_sin, rope.q_norm != nullptr ? rs.q_norm : nullptr,
                       rope.k_norm != nullptr ? rs.k_norm : nullptr, sub);
  for (int p = 0; p * kRowsPerPass < rows; ++p) {
    const int row = p * kRowsPerPass + tid / kLanes;
    const int r = min(row, rows - 1);
    const bool is_q = r < group, is_v = r == group + 1;
    float x[8];
    unpack8(raw, x);
    if ((p + 1) * kRowsPerPass < rows) raw = load(p + 1);
    const bool norm = !is_v && (is_q ? rope.q_norm : rope.k_norm) != nullptr;
    norm_rope8<kLanes>(x, norm, is_q, is_v, rope.eps, rr, sub);
    if (row >= rows) continue;
    if (is_q) {
      *reinterpret_cast<uint4*>(qs + r * D + sub * 8) = pack8(x);
      continue;
    }
    const uint4 bytes = store_kv8<D, kHeadMajor, kFp8>(rope, x, is_v, g, slot, sub);
    if constexpr (kFp8) {
      *reinterpret_cast<uint2*>((is_v ? nk.v : nk.k) + sub * 8) = make_uint2(bytes.x, bytes.y);
    } else {
      *reinterpret_cast<uint4*>((is_v ? nk.v : nk.k) + sub * 16) = bytes;
    }
  }
  __syncthreads();
}

// kFused (paged_attention_rope): q, k and v come from rope.qkv. The keys before the new
// token's were written by earlier steps, so the cache copies of the first tiles start before
// pdl_wait(), with only the step's inputs (lengths, block tables, positions, slots) and the
// token's cos/sin row and norm weights (copied to shared memory) read before them. After the
// wait, rope_prologue norms and rotates the group's q heads into shared memory, and in the
// CTA whose split ends at the new token also makes its K/V and stores them; the warp holding
// the last tile then patches them into the ring row its copy left empty. Earlier versions
// (H200, decode steps 6-12% slower than the store kernel plus the plain kernel): q normed
// and rotated in each warp's fragment registers, 16 rows by 4 warps where a group of 2 needs
// 2 rows once, and the K/V rows by warp 0 behind a barrier with the rope inputs loaded after
// the wait.
template <int D, bool kHeadMajor, bool kFp8, bool kFused, int kStages>
__global__ void __launch_bounds__(kThreads, 3)
    decode_mma_kernel(PagedAttentionArgs a, QkNormRopeArgs rope, int group, AttentionSplit split,
                      float* part_ml, float* part_acc) {
  if constexpr (!kFused) {
    pdl_wait();  // launch.cuh: before touching what earlier kernels write
    pdl_trigger();
  }
  constexpr int kKSteps = D / 16;      // k-steps of Q K^T
  constexpr int kONb = D / 8;          // n-blocks of O
  using T = Tile<D, kFp8>;
  constexpr int kChunks = T::kRowBytes / 16;  // 16-byte copies per row
  constexpr int kRowsPerPass = 32 / kChunks;
  constexpr int kKWords = D / 16;      // 4-byte K words a lane reads per key row (= k-steps)
  constexpr int kVWords = D / 32;      // 4-byte V words a lane reads per key row
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int quad = lane / 4, c = lane % 4;  // fragment row group and column pair
  using Ring = WarpRing<D, kFp8, kStages>;
  Ring& ring = reinterpret_cast<Ring*>(smem_raw)[warp];

  // Heads fastest: a sequence's KV heads run side by side (in seq_order, longest first).
  const int x = blockIdx.y;
  const int b = a.seq_order != nullptr && a.num_seqs > 1 ? a.seq_order[x] : x;
  const int g = blockIdx.x;
  const int z = blockIdx.z;
  const int seq_len = a.seq_lens[b];
  const int64_t rows_total = int64_t(a.num_tokens) * a.num_q_heads;
  const int64_t row0 = int64_t(b) * a.num_q_heads + g * group;  // token b: one per sequence
  const float k_scale = kFp8 ? a.kv.scale[g] : 1.0f;
  const float v_scale = kFp8 ? a.kv.scale[a.num_kv_heads + g] : 1.0f;
  const float qscale = a.scale * kLog2e * k_scale;

  const int num_active = split_count(split, seq_len, kKeys);
  int k_begin = 0, k_end = 0;
  if (z < num_active) split_key_range(split, seq_len, kKeys, z, &k_begin, &k_end);
  const int num_tiles = k_end > k_begin ? (k_end - k_begin + kKeys - 1) / kKeys : 0;
  // Fused: the split that ends at the new token owns it; its key is not copied from the cache.
  const bool owns_new = kFused && num_tiles > 0 && k_end == seq_len;
  const int cache_end = owns_new ? seq_len - 1 : k_end;
  // Fused: the token's rope inputs, copied before the tiles (so the first wait covers them).
  NewKv<D, kFp8>* nk = nullptr;
  RopeSmem<D>* rs = nullptr;
  bf16* qs = nullptr;
  int new_slot = -1;
  if constexpr (kFused) {
    nk = reinterpret_cast<NewKv<D, kFp8>*>(smem_raw + kWarps * sizeof(Ring));
    rs = reinterpret_cast<RopeSmem<D>*>(nk + 1);
    qs = reinterpret_cast<bf16*>(rs + 1);
    copy_rope_inputs<D>(*rs, rope, rope_position(rope.positions[b], rope.max_pos), tid);
    cp_async_commit();
    if (owns_new) new_slot = rope.slot_mapping[b];
  }
  const int my_tiles = num_tiles > warp ? (num_tiles - warp + kWarps - 1) / kWarps : 0;

  const int32_t* table = a.block_tables + int64_t(b) * a.max_blocks_per_seq;
  const auto* kc = static_cast<const uint8_t*>(a.k_cache);
  const auto* vc = static_cast<const uint8_t*>(a.v_cache);
  const int bs = a.block_size;
  constexpr int kElem = kFp8 ? 1 : 2;  // bytes per cache element
  const int64_t row_stride = (kHeadMajor ? D : int64_t(a.num_kv_heads) * D) * kElem;
  auto tile_key0 = [&](int i) { return k_begin + (warp + kWarps * i) * kKeys; };
  // Tiles that start a page (the common case: 16-key tiles, pages of a multiple of 16) find
  // their page once; lane l holds the page of the warp's tile 32 r + l for the current round
  // r (the next round is loaded half a round ahead), so the copies never wait on the table.
  const bool paged_tiles = bs % kKeys == 0 && k_begin % kKeys == 0;
  auto page_of = [&](int i) { return tile_key0(i) < k_end ? table[tile_key0(i) / bs] : 0; };
  int pages = paged_tiles ? page_of(lane) : 0, next_pages = 0;

  // The warp's i-th tile into stage i % kStages; an empty commit past the end keeps the wait
  // counts uniform.
  auto issue = [&](int i) {
    if (i < my_tiles) {
      const int key0 = tile_key0(i);
      const int s = i % kStages;
      if (paged_tiles) {
        if (i % 32 == 16) next_pages = page_of(i + 16 + lane);
        if (i % 32 == 0 && i > 0) pages = next_pages;
        const int page = __shfl_sync(0xffffffffu, pages, i % 32);
        const int64_t base = kv_row_offset<kHeadMajor>(page, key0 % bs, g, a.num_kv_heads, bs, D) * kElem;
#pragma unroll
        for (int n = 0; n < kKeys / kRowsPerPass; ++n) {
          const int r = lane / kChunks + kRowsPerPass * n, part = lane % kChunks;
          const int64_t off = base + r * row_stride + part * 16;
          const bool valid = key0 + r < cache_end;
          cp_async_16(&ring.k[s][r][part * 16], kc + off, valid);
          cp_async_16(&ring.v[s][r][part * 16], vc + off, valid);
        }
      } else {
#pragma unroll
        for (int n = 0; n < kKeys / kRowsPerPass; ++n) {
          const int r = lane / kChunks + kRowsPerPass * n, part = lane % kChunks;
          const int j = key0 + r;
          const bool valid = j < cache_end;
          int64_t off = 0;
          if (valid) {
            off = kv_row_offset<kHeadMajor>(table[j / bs], j % bs, g, a.num_kv_heads, bs, D) * kElem +
                  part * 16;
          }
          cp_async_16(&ring.k[s][r][part * 16], kc + off, valid);
          cp_async_16(&ring.v[s][r][part * 16], vc + off, valid);
        }
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) issue(i);
  if constexpr (kFused) {
    pdl_wait();  // the qkv product's output from here on
    pdl_trigger();
  }

  // Head dims are permuted, identically for Q and K (a dot product does not notice): lane
  // column c owns dims [c D/4, (c + 1) D/4) of every key row, and k-step ks takes its 4 bytes
  // at c D/4 + 4 ks, so a lane reads its K fragments of a tile as D/16 words of one row.
  // Q's A fragments: register e of k-step ks holds row quad (e even) or quad + 8 (e odd),
  // dims c D/4 + 4 ks + (e < 2 ? 0 : 2) and the next; rows >= group are 0.
  // bf16 caches: Q's bf16 A fragments in the natural order (dims 16 ks + 2c, + 8).
  // Fused: q (normed, rotated) from qs, after the prologue.
  if constexpr (kFused) rope_prologue<D, kHeadMajor, kFp8, kStages>(qs, *nk, *rs, rope, b, g, group, owns_new, new_slot, tid);
  const bf16* q_rows = kFused ? qs : a.q + row0 * D;
  uint32_t qa[kKSteps][4];
  {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = quad + 8 * h;
      const bf16* q = q_rows + min(r, group - 1) * D;
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks) {
        if constexpr (kFp8) {
          const uint2 four = *reinterpret_cast<const uint2*>(q + c * (D / 4) + 4 * ks);
          qa[ks][h] = r < group ? bf16x2_to_f16x2(four.x) : 0u;
          qa[ks][2 + h] = r < group ? bf16x2_to_f16x2(four.y) : 0u;
        } else {
          qa[ks][h] = r < group ? *reinterpret_cast<const uint32_t*>(q + 16 * ks + 2 * c) : 0u;
          qa[ks][2 + h] = r < group ? *reinterpret_cast<const uint32_t*>(q + 16 * ks + 2 * c + 8) : 0u;
        }
      }
    }
  }

  // O's columns are permuted too: n-block j's column n is dim n D/8 + j, so that V's B
  // fragments (two keys of one dim) come from one word per key row: lane quad reads bytes
  // [quad D/8, (quad + 1) D/8) of rows 2c, 2c + 1, 2c + 8, 2c + 9 and interleaves them.
  float o[kONb][4];
#pragma unroll
  for (int nb = 0; nb < kONb; ++nb) o[nb][0] = o[nb][1] = o[nb][2] = o[nb][3] = 0.0f;
  float m[2] = {-FLT_MAX, -FLT_MAX}, l[2] = {0.0f, 0.0f};  // rows quad and quad + 8

  for (int i = 0; i < my_tiles; ++i) {
    issue(i + kStages - 1);
    cp_async_wait<kStages - 1>();
    __syncwarp();  // every lane's copies of tile i visible to the warp
    const int s = i % kStages;
    const int key0 = tile_key0(i);
    if (kFused && owns_new && key0 + kKeys >= seq_len) {  // the new key's tile: its row was left empty
      const int r = seq_len - 1 - key0;
      constexpr int kRowChunks = T::kRowBytes / 16;  // 16-byte pieces of a row
      if (lane < 2 * kRowChunks) {
        const int part = lane % kRowChunks;
        uint8_t* dst = lane < kRowChunks ? &ring.k[s][r][part * 16] : &ring.v[s][r][part * 16];
        const uint8_t* src = lane < kRowChunks ? nk->k + part * 16 : nk->v + part * 16;
        *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
      }
      __syncwarp();
    }

    // S = Q K^T over the tile's two n-blocks of 8 keys.
    float sc[2][4] = {};
#pragma unroll
    for (int nb = 0; nb < 2; ++nb) {
      if constexpr (kFp8) {
        uint32_t kw[kKWords];
        load_words(kw, &ring.k[s][nb * 8 + quad][c * (D / 4)]);
#pragma unroll
        for (int ks = 0; ks < kKSteps; ++ks) {
          uint32_t b0, b1;
          fp8x4_to_f16x2x2(kw[ks], &b0, &b1);
          mma_f16(sc[nb], qa[ks][0], qa[ks][1], qa[ks][2], qa[ks][3], b0, b1);
        }
      } else {
        // Matrices: keys nb*8.. x dims [16 ks, +8), [16 ks + 8, +8), then k-step ks + 1's.
#pragma unroll
        for (int ks = 0; ks < kKSteps; ks += 2) {
          uint32_t kf[4];
          ldmatrix_x4(kf, &ring.k[s][nb * 8 + lane % 8][2 * (16 * ks + 8 * (lane / 8))]);
          mma_bf16(sc[nb], qa[ks][0], qa[ks][1], qa[ks][2], qa[ks][3], kf[0], kf[1]);
          mma_bf16(sc[nb], qa[ks + 1][0], qa[ks + 1][1], qa[ks + 1][2], qa[ks + 1][3], kf[2], kf[3]);
        }
      }
    }
    if (key0 + kKeys > k_end) {  // the split's last tile: keys past its end see nothing
#pragma unroll
      for (int nb = 0; nb < 2; ++nb) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (key0 + nb * 8 + 2 * c + (e & 1) >= k_end) sc[nb][e] = -INFINITY;
        }
      }
    }

    // Online softmax; row h's values are sc[nb][2 h], sc[nb][2 h + 1], the quad holds the row.
    // O is rescaled only when some row's maximum moved (rarely, after the first tiles).
    float corr[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = fmaxf(m[h], fmaxf(fmaxf(sc[0][2 * h], sc[0][2 * h + 1]), fmaxf(sc[1][2 * h], sc[1][2 * h + 1])));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      corr[h] = exp2_ftz((m[h] - mx) * qscale);
      m[h] = mx;
      const float shift = mx * qscale;
      float sum = 0.0f;
#pragma unroll
      for (int nb = 0; nb < 2; ++nb) {
        sc[nb][2 * h] = exp2_ftz(fmaf(sc[nb][2 * h], qscale, -shift));
        sc[nb][2 * h + 1] = exp2_ftz(fmaf(sc[nb][2 * h + 1], qscale, -shift));
        sum += sc[nb][2 * h] + sc[nb][2 * h + 1];
      }
      l[h] = l[h] * corr[h] + sum;
    }
    if (__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) {
#pragma unroll
      for (int nb = 0; nb < kONb; ++nb) {
        o[nb][0] *= corr[0];
        o[nb][1] *= corr[0];
        o[nb][2] *= corr[1];
        o[nb][3] *= corr[1];
      }
    }

    // O += P V: the S accumulators are P's A fragment (keys 0..7 then 8..15).
    if constexpr (kFp8) {
      uint32_t pa[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const __half2 p2 = __floats2half2_rn(sc[e / 2][2 * (e % 2)], sc[e / 2][2 * (e % 2) + 1]);
        pa[e] = *reinterpret_cast<const uint32_t*>(&p2);
      }
      uint32_t v[4][kVWords];  // rows 2c, 2c + 1 (P's keys for b0), 2c + 8, 2c + 9 (b1)
#pragma unroll
      for (int k = 0; k < 4; ++k) load_words(v[k], &ring.v[s][2 * c + (k & 1) + 8 * (k / 2)][quad * (D / 8)]);
#pragma unroll
      for (int w = 0; w < kVWords; ++w) {
        // Byte t of two rows side by side: the two keys of dim quad D/8 + 4 w + t, n-block 4 w + t.
        uint32_t b0[4], b1[4];
        fp8x4_to_f16x2x2(__byte_perm(v[0][w], v[1][w], 0x5140), &b0[0], &b0[1]);
        fp8x4_to_f16x2x2(__byte_perm(v[0][w], v[1][w], 0x7362), &b0[2], &b0[3]);
        fp8x4_to_f16x2x2(__byte_perm(v[2][w], v[3][w], 0x5140), &b1[0], &b1[1]);
        fp8x4_to_f16x2x2(__byte_perm(v[2][w], v[3][w], 0x7362), &b1[2], &b1[3]);
#pragma unroll
        for (int t = 0; t < 4; ++t) mma_f16(o[4 * w + t], pa[0], pa[1], pa[2], pa[3], b0[t], b1[t]);
      }
    } else {
      // bf16 P would keep 8 significant bits; P as the sum of two bf16 parts keeps 16, more
      // than the fp8 path's f16 P (the tensor cores have time to spare here).
      uint32_t hi[4], lo[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float2_to_bf16x2_split(sc[e / 2][2 * (e % 2)], sc[e / 2][2 * (e % 2) + 1], &hi[e], &lo[e]);
      }
#pragma unroll
      for (int db = 0; db < D / 16; ++db) {
        // Matrices: keys [0, 8) dims [0, 8), keys [8, 16) dims [0, 8), then dims [8, 16).
        uint32_t vf[4];
        ldmatrix_x4_trans(vf, &ring.v[s][lane % 8 + ((lane / 8) % 2) * 8][2 * (db * 16 + (lane / 16) * 8)]);
        mma_bf16(o[2 * db], hi[0], hi[1], hi[2], hi[3], vf[0], vf[1]);
        mma_bf16(o[2 * db + 1], hi[0], hi[1], hi[2], hi[3], vf[2], vf[3]);
        mma_bf16(o[2 * db], lo[0], lo[1], lo[2], lo[3], vf[0], vf[1]);
        mma_bf16(o[2 * db + 1], lo[0], lo[1], lo[2], lo[3], vf[2], vf[3]);
      }
    }
    __syncwarp();  // done with stage s before it is refilled
  }
  cp_async_wait<0>();

  // Merge the four warps' states: row r's weight per warp is 2^((m_w - M) qscale). Each warp
  // leaves its O in fragment order (lane fastest: no bank conflicts); thread (w, lane) then
  // combines n-blocks [w kONb / 4, (w + 1) kONb / 4) of that lane's fragment for all warps.
  __syncthreads();
  MergeSmem<D>& mg = *reinterpret_cast<MergeSmem<D>*>(smem_raw);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = l[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (c == 0) {
      mg.m[warp][quad + 8 * h] = m[h];
      mg.l[warp][quad + 8 * h] = sum;
    }
  }
#pragma unroll
  for (int j = 0; j < kONb; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) mg.o[warp][4 * j + e][lane] = o[j][e];
  }
  __syncthreads();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = quad + 8 * h;
    if (r >= group) continue;
    float mx = -FLT_MAX;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, mg.m[w][r]);
    float wt[kWarps], sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      wt[w] = exp2_ftz((mg.m[w][r] - mx) * qscale);
      sum += mg.l[w][r] * wt[w];
    }
    const int64_t row = row0 + r;
    const int64_t p = int64_t(z) * rows_total + row;
    if (part_acc != nullptr && warp == 0 && c == 0) {  // an empty split: M = -FLT_MAX, sum 0
      part_ml[2 * p] = mx * qscale;
      part_ml[2 * p + 1] = sum;
    }
#pragma unroll
    for (int jj = 0; jj < kONb / kWarps; ++jj) {
      const int j = warp * (kONb / kWarps) + jj;
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e) {
        float acc = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) acc += mg.o[w][4 * j + e][lane] * wt[w];
        const int d = o_dim<D, kFp8>(j, 2 * c + (e & 1));
        if (part_acc == nullptr) {
          a.out[row * D + d] = __float2bfloat16(acc * v_scale / sum);
        } else {
          part_acc[p * D + d] = acc * v_scale;
        }
      }
    }
  }
}

template <int D, bool kHeadMajor, bool kFp8, bool kFused, int kStages>
void launch(const PagedAttentionArgs& a, const QkNormRopeArgs& rope, const AttentionSplit& split,
            float* part_ml, float* part_acc, cudaStream_t stream) {
  constexpr int kSmem = smem_bytes<D, kFp8, kFused, kStages>();
  constexpr auto kernel = decode_mma_kernel<D, kHeadMajor, kFp8, kFused, kStages>;
  allow_dynamic_smem<kernel>(kSmem);
  const dim3 grid(static_cast<unsigned>(a.num_kv_heads), static_cast<unsigned>(a.num_seqs),
                  static_cast<unsigned>(split.num_splits));
  launch_pdl(kFused ? "attention decode_mma_kernel (rope)" : "attention decode_mma_kernel", kernel,
             grid, kThreads, kSmem, stream, a, rope, a.num_q_heads / a.num_kv_heads, split, part_ml,
             part_acc);
  KS_CUDA_CHECK_LAUNCH("attention decode_mma_kernel");
}

// How full `ctas` CTAs keep `slots` resident ones over their waves, on average; a batch
// short of one wave counts as the key splits that fill it (plan_attention_split).
inline double wave_fill(int64_t ctas, int64_t slots) {
  if (ctas < slots) return double(slots / ctas * ctas) / double(slots);
  const int64_t waves = (ctas + slots - 1) / slots;
  return double(ctas) / double(waves * slots);
}

// The bf16 ring's tiles for a's batch on num_sms SMs. At D = 64 both depths fit 3 CTAs an SM,
// so 3. At D = 128 a ring of 3 (one tile more in flight per warp, 2 CTAs an SM) wins where
// it fills the last wave better: a CTA alone on an SM (a partly filled wave, or the tail of
// a long one) streams at what its warps keep in flight. H200, `cuda_ops_bench decode-fit`,
// 1,024 keys, 2 KV heads, ring 2 -> 3: 264 CTAs 0.047 -> 0.039 ms, 512 CTAs 0.077 ->
// 0.073, 512 CTAs of 4,096 keys 0.292 -> 0.266; but 396 CTAs (one full wave of 3 an SM)
// 0.056 -> 0.061, 2,048 CTAs (5.2 waves) 0.265 -> 0.268 and 1,024 (2.6 waves) at par. So:
// 3 where its fill is 5 points better, and never from two waves of 3 CTAs an SM up, whose
// tails weigh less. KESTREL_DECODE_MMA_BF16_STAGES = 2 or 3 forces a depth (read at each
// launch, for benchmarks).
inline int bf16_ring_tiles(const PagedAttentionArgs& a, int num_sms) {
  if (const char* env = std::getenv("KESTREL_DECODE_MMA_BF16_STAGES")) {
    const int forced = std::atoi(env);
    if (forced == 2 || forced == 3) return forced;
  }
  if (a.head_dim != 128) return 3;
  const int64_t ctas = int64_t(a.num_seqs) * a.num_kv_heads;
  const int64_t slots2 = int64_t(num_sms) * ctas_per_sm<128, false, 2>();
  const int64_t slots3 = int64_t(num_sms) * ctas_per_sm<128, false, 3>();
  if (ctas >= 2 * slots2) return 2;
  return wave_fill(ctas, slots3) > wave_fill(ctas, slots2) + 0.05 ? 3 : 2;
}

// Calls f(d, fp8, stages) with a's head dim, cache type and ring depth (on num_sms SMs) as
// constants.
template <typename F>
auto with_kernel_config(const PagedAttentionArgs& a, int num_sms, F&& f) {
  auto with_stages = [&](auto d, auto fp8) {
    using Fp8 = decltype(fp8);
    if constexpr (Fp8::value) {
      return f(d, fp8, std::integral_constant<int, kFp8Stages>{});
    } else {
      return bf16_ring_tiles(a, num_sms) == 2 ? f(d, fp8, std::integral_constant<int, 2>{})
                                              : f(d, fp8, std::integral_constant<int, 3>{});
    }
  };
  auto with_type = [&](auto d) {
    return a.kv.fp8 ? with_stages(d, std::true_type{}) : with_stages(d, std::false_type{});
  };
  return a.head_dim == 64 ? with_type(std::integral_constant<int, 64>{})
                          : with_type(std::integral_constant<int, 128>{});
}

// launch<> for a's head dim, cache type, ring depth and page layout.
template <bool kFused>
void launch_for(const PagedAttentionArgs& a, const QkNormRopeArgs& rope, const AttentionSplit& split,
                float* part_ml, float* part_acc, cudaStream_t stream) {
  with_kernel_config(a, multiprocessor_count(), [&](auto d, auto fp8, auto stages) {
    constexpr int D = decltype(d)::value, S = decltype(stages)::value;
    constexpr bool kFp8 = decltype(fp8)::value;
    a.kv_head_major ? launch<D, true, kFp8, kFused, S>(a, rope, split, part_ml, part_acc, stream)
                    : launch<D, false, kFp8, kFused, S>(a, rope, split, part_ml, part_acc, stream);
  });
}

}  // namespace

}  // namespace kestrel::kernels::detail
