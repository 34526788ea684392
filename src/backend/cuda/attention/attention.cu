// Paged attention over a flat mixed batch (prefill chunks and decodes in one launch). This
// file holds the general kernel, the split merge and the dispatch; a batch of decodes only
// (host-side max_query_len 1, any GQA group) takes attention_decode.cu's kernel instead, and
// a batch with prefill rows at head dims 64 and 128 attention_prefill.cu's tensor-core kernel
// (when its switch, kPrefillKernelEnabled, is on).
// The split plan below counts the general kernel's CTAs for both non-decode kernels; the
// tensor-core kernel has fewer (128 rows each, not 16), so it may split less than it could.
//
// Maths, for query token t of sequence b at position pos (= seq_len - query_len + i) and
// query head h reading KV head g = h / G (G = Hq / Hkv):
//   out[t, h] = sum_{j <= pos} softmax_j(scale * q[t, h] . K[b, j, g]) V[b, j, g]
// with K/V of key j of sequence b in page block_tables[b, j / block_size] at offset
// j % block_size (bf16; layout in kv_layout.cuh). Accumulation in fp32, output rounded to bf16.
//
// Geometry (FlashAttention-2 style, on CUDA cores for now). A CTA of 4 warps owns one
// (sequence, KV head, tile of query tokens): its rows are the (token, head) pairs of up to
// q_tile = 16 / G tokens times the G query heads of the group, so every K/V byte the CTA loads
// serves the whole GQA group. Keys stream through shared memory in tiles of 32, double-
// buffered with cp.async (16-byte copies, zero-filled past the end). Warp w owns rows
// w, w + 4, ... and keeps an online softmax per row: lane j scores key j of the tile, the
// warp reduces max and sum, and for P.V lane l owns dims [l D/32, (l+1) D/32).
//
// The flat batch has no host-side plan: grid.x = ceil(T / q_tile) + B bounds the number of
// (sequence, tile) pairs, and each CTA finds its pair by a warp prefix scan over
// query_start_loc; CTAs past the last pair exit. That keeps the launch graph-capturable.
// When those CTAs cannot fill the GPU (few long sequences), grid.z splits each one's keys
// into chunks sized from its own length (Flash-Decoding; kernels.h, AttentionSplit): each CTA
// writes its rows' (max, sum, unnormalised output) in fp32 and merge_kernel combines them.
// Head dims below 32 leave lanes D..31 idle in P.V.
//
// fp8 cache (kernels.h, KvQuant): a tile's e4m3 rows are copied into the second K and V
// buffers (staging) and turned into the first ones' bf16 rows (x scale, exact) before the
// maths, the next tile's copy then overlapping the maths.
//
// Bytes: each CTA reads K and V of keys [0, last position of its tile], so decode reads the
// KV cache once per step (the floor); prefill re-reads it once per query tile (from L2 mostly).
// Decode through this kernel ran at ~26% of the copy rate (one 16 KB tile in flight per CTA,
// barriers and reductions per 32-key tile), hence the decode kernel.
#include <algorithm>
#include <cfloat>
#include <type_traits>

#include "backend/cuda/attention/attention_decode.cuh"
#include "backend/cuda/attention/attention_prefill.cuh"
#include "backend/cuda/attention/attention_tiles.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/attention/kv_fp8.cuh"
#include "backend/cuda/attention/kv_layout.cuh"

namespace kestrel::kernels {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kKeysPerTile = 32;
constexpr int kMaxRows = kMaxAttentionGroup;  // (token, head) rows per CTA
constexpr int kRowsPerWarp = kMaxRows / kWarps;
constexpr int kKPad = 8;  // bf16 of padding per K row: lane j reading row j avoids bank conflicts
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;  // 0: fill the 16 bytes with zeros, read nothing
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

template <int D>
struct alignas(16) Smem {  // 16-byte rows: cp.async targets and float4 reads
  bf16 k[2][kKeysPerTile][D + kKPad];
  bf16 v[2][kKeysPerTile][D];
  float q[kMaxRows][D];  // pre-multiplied by scale * log2(e)
  int seq;               // -1: this CTA has no work
  int tile;
};


template <int D, bool kHeadMajor, bool kFp8>
__global__ void __launch_bounds__(kThreads)
    paged_attention_kernel(PagedAttentionArgs a, int group, int q_tile, AttentionSplit split,
                           float* part_ml, float* part_acc) {
  pdl_wait();  // launch.cuh: before touching what earlier kernels write
  pdl_trigger();
  // P.V: lane l owns dims [l kDimsPerLane, (l + 1) kDimsPerLane); below D = 32 only the
  // first D lanes own one dim each.
  constexpr int kDimsPerLane = D >= 32 ? D / 32 : 1;
  constexpr int kActiveLanes = D / kDimsPerLane;
  constexpr int kChunks = D / 8;  // 8-dim chunks of a K row in q . k
  __shared__ Smem<D> sm;
  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int warp = tid / 32;
  const int g = blockIdx.y;

  if (warp == 0) detail::locate_query_tile(a, q_tile, blockIdx.x, &sm.seq, &sm.tile);
  __syncthreads();
  const int b = sm.seq;
  if (b < 0) return;
  const int tile = sm.tile;

  const int q_begin = a.query_start_loc[b];
  const int q_len = a.query_start_loc[b + 1] - q_begin;
  const int seq_len = a.seq_lens[b];
  const int first = tile * q_tile;  // first query token of this tile, within the sequence
  const int num_tok = min(q_tile, q_len - first);
  const int num_rows = num_tok * group;
  const int pos0 = seq_len - q_len + first;  // position of that token
  const int kv_end = pos0 + num_tok;         // keys [0, kv_end) are needed by some row
  const int z = blockIdx.z;  // key split
  int k_begin, k_end;        // this CTA's keys
  detail::split_key_range(split, kv_end, kKeysPerTile, z, &k_begin, &k_end);

  // Row r: token first + r / group, query head g * group + r % group.
  const float qscale = a.scale * kLog2e;
  for (int i = tid; i < num_rows * (D / 2); i += kThreads) {
    const int r = i / (D / 2);
    const int d = (i % (D / 2)) * 2;
    const int64_t tok = q_begin + first + r / group;
    const int head = g * group + r % group;
    const __nv_bfloat162 v =
        *reinterpret_cast<const __nv_bfloat162*>(a.q + (tok * a.num_q_heads + head) * D + d);
    sm.q[r][d] = __low2float(v) * qscale;
    sm.q[r][d + 1] = __high2float(v) * qscale;
  }

  const int32_t* block_table = a.block_tables + int64_t(b) * a.max_blocks_per_seq;
  const int first_tile = k_begin / kKeysPerTile;  // kv_chunk is a multiple of the tile
  // Tile kt's K and V rows into shared rows k_dst + key k_pitch, v_dst + key v_pitch (in
  // elements of the cache's type E), in 16-byte pieces (8 bf16 or 16 e4m3 dims), zeros past
  // k_end. Unrolled so that each thread's block-table reads are in flight together.
  auto copy_tile = [&](int kt, auto* k_dst, int k_pitch, auto* v_dst, int v_pitch) {
    using E = std::remove_pointer_t<decltype(k_dst)>;
    constexpr int kPer = 16 / int(sizeof(E));  // elements per piece
    constexpr int kPieces = D / kPer;          // pieces per row
    constexpr int kIters = (kKeysPerTile * kPieces + kThreads - 1) / kThreads;
#pragma unroll
    for (int n = 0; n < kIters; ++n) {
      const int i = tid + n * kThreads;
      if (kKeysPerTile * kPieces % kThreads != 0 && i >= kKeysPerTile * kPieces) break;
      const int key = i / kPieces;
      const int part = i % kPieces;
      const int j = kt * kKeysPerTile + key;
      const bool valid = j < k_end;
      int64_t off = 0;
      if (valid) {
        off = kv_row_offset<kHeadMajor>(block_table[j / a.block_size], j % a.block_size, g,
                                        a.num_kv_heads, a.block_size, D) +
              part * kPer;
      }
      cp_async_16(k_dst + key * k_pitch + part * kPer, static_cast<const E*>(a.k_cache) + off, valid);
      cp_async_16(v_dst + key * v_pitch + part * kPer, static_cast<const E*>(a.v_cache) + off, valid);
    }
    cp_async_commit();
  };
  auto load_tile = [&](int kt, int buf) {
    copy_tile(kt, &sm.k[buf][0][0], D + kKPad, &sm.v[buf][0][0], D);
  };
  // fp8: tile kt's e4m3 rows ([kKeysPerTile][D] bytes each) into k[1] and v[1] (staging),
  // and from there into k[0] and v[0] as bf16.
  auto* const stage_k = reinterpret_cast<uint8_t*>(&sm.k[1][0][0]);
  auto* const stage_v = reinterpret_cast<uint8_t*>(&sm.v[1][0][0]);
  auto stage_tile = [&](int kt) { copy_tile(kt, stage_k, D, stage_v, D); };

  float acc[kRowsPerWarp][kDimsPerLane];
  float m[kRowsPerWarp], l[kRowsPerWarp];
  int row_end[kRowsPerWarp];  // keys [k_begin, row_end) are visible to the row (causal)
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    m[i] = -FLT_MAX;
    l[i] = 0.0f;
    const int r = warp + i * kWarps;
    row_end[i] = min(pos0 + r / group + 1, k_end);
#pragma unroll
    for (int d = 0; d < kDimsPerLane; ++d) acc[i][d] = 0.0f;
  }

  const int end_tile = k_end > k_begin ? (k_end + kKeysPerTile - 1) / kKeysPerTile : first_tile;
  if (end_tile > first_tile) {
    if (kFp8) {
      stage_tile(first_tile);
    } else {
      load_tile(first_tile, 0);
    }
  }
  for (int kt = first_tile; kt < end_tile; ++kt) {
    const int buf = kFp8 ? 0 : (kt - first_tile) & 1;
    if constexpr (kFp8) {
      cp_async_wait<0>();
      __syncthreads();  // tile kt's bytes (and, on the first pass, sm.q) visible
      fp8_tile_to_bf16<kKeysPerTile, D, kThreads>(stage_k, &sm.k[0][0][0], D + kKPad,
                                                   a.kv.scale[g], tid);
      fp8_tile_to_bf16<kKeysPerTile, D, kThreads>(stage_v, &sm.v[0][0][0], D,
                                                   a.kv.scale[a.num_kv_heads + g], tid);
      __syncthreads();  // bf16 tile visible, staging free
      if (kt + 1 < end_tile) stage_tile(kt + 1);
    } else {
      if (kt + 1 < end_tile) {
        load_tile(kt + 1, buf ^ 1);
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();  // tile kt (and, on the first pass, sm.q) visible to all warps
    }

    const int key = kt * kKeysPerTile + lane;
    float s[kRowsPerWarp];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) s[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const BfVec<8> kv = *reinterpret_cast<const BfVec<8>*>(&sm.k[buf][lane][c * 8]);
      float kf[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) kf[e] = __bfloat162float(kv.v[e]);
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        if (warp + i * kWarps < num_rows) {
          const float4 qa = *reinterpret_cast<const float4*>(&sm.q[warp + i * kWarps][c * 8]);
          const float4 qb = *reinterpret_cast<const float4*>(&sm.q[warp + i * kWarps][c * 8 + 4]);
          // Two independent halves: shorter dependency chains than one 8-term sum.
          const float lo = qa.x * kf[0] + qa.y * kf[1] + qa.z * kf[2] + qa.w * kf[3];
          const float hi = qb.x * kf[4] + qb.y * kf[5] + qb.z * kf[6] + qb.w * kf[7];
          s[i] += lo + hi;
        }
      }
    }

    // Online softmax; p[i] = 0 for keys the row does not see (so for whole idle rows).
    float p[kRowsPerWarp];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      p[i] = 0.0f;
      const bool active = warp + i * kWarps < num_rows && kt * kKeysPerTile < row_end[i];
      if (active) {  // warp-uniform
        const float si = key < row_end[i] ? s[i] : -FLT_MAX;
        const float m_new = fmaxf(m[i], warp_max(si));
        const float corr = exp2f(m[i] - m_new);
        p[i] = key < row_end[i] ? exp2f(si - m_new) : 0.0f;
        l[i] = l[i] * corr + warp_sum(p[i]);
        m[i] = m_new;
#pragma unroll
        for (int d = 0; d < kDimsPerLane; ++d) acc[i][d] *= corr;
      }
    }

    // All 32 keys, unrolled: past the end p is 0 and V was zero-filled.
#pragma unroll
    for (int j = 0; j < kKeysPerTile; ++j) {
      // Lanes past kActiveLanes re-read dim 0 and discard the result.
      const int dl = lane < kActiveLanes ? lane : 0;
      const BfVec<kDimsPerLane> vv =
          *reinterpret_cast<const BfVec<kDimsPerLane>*>(&sm.v[buf][j][dl * kDimsPerLane]);
      float vf[kDimsPerLane];
#pragma unroll
      for (int d = 0; d < kDimsPerLane; ++d) vf[d] = __bfloat162float(vv.v[d]);
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        if (warp + i * kWarps < num_rows) {
          const float pj = __shfl_sync(0xffffffffu, p[i], j);
#pragma unroll
          for (int d = 0; d < kDimsPerLane; ++d) acc[i][d] += pj * vf[d];
        }
      }
    }
    __syncthreads();  // all warps done with buf before it is refilled
  }

#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int r = warp + i * kWarps;
    if (r >= num_rows) continue;
    const int64_t row = (q_begin + first + r / group) * int64_t(a.num_q_heads) + g * group + r % group;
    if (part_acc == nullptr) {
      if (lane >= kActiveLanes) continue;
      const float inv = 1.0f / l[i];
      BfVec<kDimsPerLane> o;
#pragma unroll
      for (int d = 0; d < kDimsPerLane; ++d) o.v[d] = __float2bfloat16(acc[i][d] * inv);
      *reinterpret_cast<BfVec<kDimsPerLane>*>(a.out + row * D + lane * kDimsPerLane) = o;
    } else {
      const int64_t part = int64_t(z) * a.num_tokens * a.num_q_heads + row;
      if (lane == 0) {
        part_ml[2 * part] = m[i];
        part_ml[2 * part + 1] = l[i];
      }
      if (lane >= kActiveLanes) continue;
#pragma unroll
      for (int d = 0; d < kDimsPerLane; ++d) part_acc[part * D + lane * kDimsPerLane + d] = acc[i][d];
    }
  }
}

// out[row] = sum_z acc_z 2^(m_z - M) / sum_z l_z 2^(m_z - M), M = max_z m_z; one warp per
// (token, query head) row. Split 0 always holds key 0, so M is finite and the sum positive.
template <int D>
__global__ void merge_kernel(const float* __restrict__ part_ml, const float* __restrict__ part_acc,
                             int num_splits, int64_t rows, bf16* __restrict__ out) {
  pdl_wait();  // launch.cuh: before touching what earlier kernels write
  pdl_trigger();
  constexpr int kDimsPerLane = D >= 32 ? D / 32 : 1;
  constexpr int kActiveLanes = D / kDimsPerLane;
  const int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows || lane >= kActiveLanes) return;
  float mx = -FLT_MAX;
  for (int z = 0; z < num_splits; ++z) mx = fmaxf(mx, part_ml[2 * (z * rows + row)]);
  float sum = 0.0f, acc[kDimsPerLane] = {};
  for (int z = 0; z < num_splits; ++z) {
    const int64_t part = z * rows + row;
    const float w = exp2f(part_ml[2 * part] - mx);
    sum += part_ml[2 * part + 1] * w;
#pragma unroll
    for (int d = 0; d < kDimsPerLane; ++d) acc[d] += part_acc[part * D + lane * kDimsPerLane + d] * w;
  }
  BfVec<kDimsPerLane> o;
#pragma unroll
  for (int d = 0; d < kDimsPerLane; ++d) o.v[d] = __float2bfloat16(acc[d] / sum);
  *reinterpret_cast<BfVec<kDimsPerLane>*>(out + row * D + lane * kDimsPerLane) = o;
}

template <int D>
void launch(const PagedAttentionArgs& a, const AttentionSplit& split, float* part_ml,
            float* part_acc, cudaStream_t stream) {
  const int group = a.num_q_heads / a.num_kv_heads;
  const int q_tile = kMaxRows / group;
  const dim3 grid(static_cast<unsigned>((a.num_tokens + q_tile - 1) / q_tile + a.num_seqs),
                  static_cast<unsigned>(a.num_kv_heads), static_cast<unsigned>(split.num_splits));
  auto go = [&](auto kernel) {
    launch_pdl("paged_attention_kernel", kernel, grid, kThreads, 0, stream, a, group, q_tile,
               split, part_ml, part_acc);
  };
  if (a.kv.fp8) {
    a.kv_head_major ? go(paged_attention_kernel<D, true, true>)
                    : go(paged_attention_kernel<D, false, true>);
  } else {
    a.kv_head_major ? go(paged_attention_kernel<D, true, false>)
                    : go(paged_attention_kernel<D, false, false>);
  }
  KS_CUDA_CHECK_LAUNCH("paged_attention_kernel");
}

template <int D>
void launch_merge(const float* part_ml, const float* part_acc, int num_splits, int64_t rows,
                  bf16* out, cudaStream_t stream) {
  launch_pdl("attention merge_kernel", merge_kernel<D>,
             static_cast<unsigned>((rows + kWarps - 1) / kWarps), kThreads, 0, stream, part_ml,
             part_acc, num_splits, rows, out);
  KS_CUDA_CHECK_LAUNCH("attention merge_kernel");
}

// Decodes take the decode kernel (attention_decode.cu), which merges its own splits; batches
// with prefill rows at head dims 64 and 128 the tensor-core kernel (attention_prefill.cu),
// everything else the general one.
// rope non-null: paged_attention_rope (a decode batch: one of the two decode kernels).
template <int D>
void run(const PagedAttentionArgs& a, const AttentionSplit& split, float* part_ml, float* part_acc,
         cudaStream_t stream, const QkNormRopeArgs* rope = nullptr) {
  if (detail::use_decode_mma(a)) {
    if (rope != nullptr) {
      detail::decode_mma_attention_rope(a, *rope, split, part_ml, part_acc, stream);
    } else {
      detail::decode_mma_attention(a, split, part_ml, part_acc, stream);
    }
  } else if (detail::use_decode_kernel(a)) {  // merges its own splits
    return detail::decode_attention(a, rope != nullptr ? *rope : QkNormRopeArgs{}, split, part_ml,
                                    part_acc, stream);
  } else if (detail::use_prefill_kernel(a)) {
    detail::prefill_attention(a, split, part_ml, part_acc, stream);
  } else {
    launch<D>(a, split, part_ml, part_acc, stream);
  }
  if (split.num_splits > 1) {
    const int64_t rows = int64_t(a.num_tokens) * a.num_q_heads;
    launch_merge<D>(part_ml, part_acc, split.num_splits, rows, a.out, stream);
  }
}

// Resident CTAs per SM the split plan assumes (shared memory allows about 5 at D = 128).
constexpr int kCtasPerSm = 4;
// Fewer keys than this per split would cost more in partials and merging than it gains.
// The decode kernel merges in its own last CTA and has a whole 48-key split in flight at
// once (three ring tiles at D = 128), so short splits pay there. Single stream on an H100
// (batch 1, 640 keys, forward time): 32 keys 0.965 ms, 48 0.948, 64 0.951; no split 1.579.
constexpr int kMinKeysPerSplit = 128;
constexpr int kMinDecodeKeysPerSplit = 48;
// Halves of a multi-wave batch's longest sequences (AttentionSplit::tail_seqs) have at least
// this many keys: a shorter sequence stays whole.
constexpr int kMinTailKeys = 128;

}  // namespace

AttentionSplit plan_attention_split(const PagedAttentionArgs& a, int max_seq_len, int num_sms,
                                    int decode_ctas_per_sm) {
  int64_t ctas = 0, slots = 0;
  if (detail::use_decode_mma(a)) {
    // The fp8 tensor-core decode kernel: one CTA per (sequence, KV head); a batch short of
    // one wave splits its keys into the most chunks that still fit in it, as below.
    ctas = int64_t(a.num_seqs) * a.num_kv_heads;
    slots = int64_t(num_sms) * detail::decode_mma_ctas_per_sm(a, num_sms);
    if (ctas >= slots || max_seq_len < 2 * kMinKeysPerSplit) return {};
    const int64_t splits = std::min<int64_t>({slots / ctas, max_seq_len / kMinKeysPerSplit,
                                              kMaxAttentionSplits});
    if (splits <= 1) return {};
    return {static_cast<int>(splits), kMinKeysPerSplit};  // whole 16-key tiles
  }
  const bool decode = detail::use_decode_kernel(a);
  if (decode) {  // one CTA per (sequence, KV head, part of the group)
    ctas = int64_t(a.num_seqs) * a.num_kv_heads * detail::decode_rows(a).parts;
    slots = int64_t(num_sms) *
            (decode_ctas_per_sm > 0 ? decode_ctas_per_sm : detail::kDecodeCtasPerSm);
  } else {
    const int group = a.num_q_heads / a.num_kv_heads;
    const int q_tile = kMaxRows / group;
    ctas = (int64_t(a.num_tokens + q_tile - 1) / q_tile + a.num_seqs) * a.num_kv_heads;
    slots = int64_t(num_sms) * kCtasPerSm;
  }
  const int min_keys = decode ? kMinDecodeKeysPerSplit : kMinKeysPerSplit;
  if (decode && ctas >= slots) {
    // Several waves: halve the longer half of the batch (in seq_order, longest first).
    if (a.seq_order == nullptr || a.num_seqs < 2 || ctas > kMaxSplitCounters ||
        max_seq_len < 2 * kMinTailKeys) {
      return {};
    }
    return {2, kMinTailKeys, a.num_seqs / 2};
  }
  if (ctas >= slots || max_seq_len < 2 * min_keys) return {};
  // Decode splits into the most parts whose CTAs still fit in one wave (floor): a second,
  // partly filled wave of long CTAs costs more than the slots a floor leaves idle (H200,
  // 16 x 4096: 5 splits 0.108 ms, 4 splits 0.084 ms; docs/cuda_backend.md). The general
  // kernel's split (ceil) was not measured that way.
  int64_t splits = std::min<int64_t>(decode ? slots / ctas : (slots + ctas - 1) / ctas,
                                     max_seq_len / min_keys);
  splits = std::min<int64_t>(splits, kMaxAttentionSplits);
  // The decode kernel's merge counts CTAs per (sequence, KV head, part) in a fixed array.
  if (splits <= 1 || (decode && ctas > kMaxSplitCounters)) return {};
  // The kernels size each tile's chunks from its own keys; kv_chunk is the smallest chunk
  // (whole tiles of the general kernel; any number of keys for the decode kernel).
  const int chunk = decode ? min_keys : (min_keys + kKeysPerTile - 1) / kKeysPerTile * kKeysPerTile;
  return {static_cast<int>(splits), chunk};
}

size_t attention_workspace_bytes(const PagedAttentionArgs& a, const AttentionSplit& split) {
  if (split.num_splits <= 1) return 0;
  return size_t(split.num_splits) * a.num_tokens * a.num_q_heads * (2 + a.head_dim) * sizeof(float);
}

namespace {
// Split partials in `workspace`: part_ml [splits, T Hq, 2], then part_acc [splits, T Hq, D].
void split_partials(const PagedAttentionArgs& a, const AttentionSplit& split, void* workspace,
                    float** part_ml, float** part_acc) {
  *part_ml = *part_acc = nullptr;
  if (split.num_splits <= 1) return;
  *part_ml = static_cast<float*>(workspace);
  *part_acc = *part_ml + 2 * int64_t(a.num_tokens) * a.num_q_heads * split.num_splits;
}

void run_any(const PagedAttentionArgs& a, const AttentionSplit& split, void* workspace,
             cudaStream_t stream, const QkNormRopeArgs* rope) {
  if (a.num_tokens == 0 || a.num_seqs == 0) return;
  float *part_ml, *part_acc;
  split_partials(a, split, workspace, &part_ml, &part_acc);
  switch (a.head_dim) {
    case 16: run<16>(a, split, part_ml, part_acc, stream, rope); break;
    case 32: run<32>(a, split, part_ml, part_acc, stream, rope); break;
    case 64: run<64>(a, split, part_ml, part_acc, stream, rope); break;
    case 128: run<128>(a, split, part_ml, part_acc, stream, rope); break;
    default: KS_CUDA_CHECK(cudaErrorInvalidValue);  // entry point validates head_dim first
  }
}

}  // namespace

void paged_attention(const PagedAttentionArgs& a, const AttentionSplit& split, void* workspace,
                     cudaStream_t stream) {
  run_any(a, split, workspace, stream, nullptr);
}

bool attention_rope_supported(const PagedAttentionArgs& a) {
  return detail::use_decode_kernel(a) &&
         (!detail::use_decode_mma(a) || detail::use_decode_mma_rope(a));
}

int decode_kernel_ctas_per_sm(const PagedAttentionArgs& a, bool rope) {
  return detail::use_decode_kernel(a) && !detail::use_decode_mma(a)
             ? detail::decode_ctas_per_sm(a, rope)
             : 0;
}

void paged_attention_rope(const PagedAttentionArgs& a, const QkNormRopeArgs& rope,
                          const AttentionSplit& split, void* workspace, cudaStream_t stream) {
  run_any(a, split, workspace, stream, &rope);
}

}  // namespace kestrel::kernels
