// Mapping a flat grid of CTAs onto the variable-length query rows of a paged-attention
// batch: shared by the CUDA-core and the tensor-core attention kernels.
#pragma once

#include "backend/cuda/kernels.h"

namespace kestrel::kernels::detail {

// Which (sequence, query tile) work item `x` is, counting each sequence's query rows in
// tiles of q_tile; run by one whole warp (a warp-wide prefix sum over 32 sequences at a
// time). Every lane gets {sequence, tile}; sequence -1 when x is past the last tile.
__device__ inline int2 locate_query_tile_all(const PagedAttentionArgs& a, int q_tile, int x) {
  const int lane = threadIdx.x % 32;
  int before = 0;  // tiles of the sequences scanned so far
  for (int base = 0; base < a.num_seqs; base += 32) {
    const int b = base + lane;
    int n = 0;
    if (b < a.num_seqs) n = (a.query_start_loc[b + 1] - a.query_start_loc[b] + q_tile - 1) / q_tile;
    int incl = n;  // inclusive prefix sum over the warp
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += y;
    }
    const unsigned hit = __ballot_sync(0xffffffffu, x < before + incl);
    if (hit != 0) {
      const int first = __ffs(hit) - 1;
      const int start = __shfl_sync(0xffffffffu, before + incl - n, first);
      return make_int2(base + first, x - start);
    }
    before += __shfl_sync(0xffffffffu, incl, 31);
  }
  return make_int2(-1, 0);
}

// The same, with lane 0 writing the answer (*tile only when *seq >= 0).
__device__ inline void locate_query_tile(const PagedAttentionArgs& a, int q_tile, int x, int* seq, int* tile) {
  const int2 r = locate_query_tile_all(a, q_tile, x);
  if (threadIdx.x % 32 == 0) {
    *seq = r.x;
    if (r.x >= 0) *tile = r.y;
  }
}

// Keys per split for a query tile that needs keys [0, kv_end): the keys are shared evenly
// over the splits in whole tiles of keys_per_tile, at least split.kv_chunk keys each, so one
// plan (one captured graph) suits every context length.
__device__ inline int split_chunk(const AttentionSplit& split, int kv_end, int keys_per_tile) {
  if (split.num_splits <= 1) return max(split.kv_chunk, kv_end);
  const int even = (kv_end + split.num_splits - 1) / split.num_splits;
  return max(split.kv_chunk, (even + keys_per_tile - 1) / keys_per_tile * keys_per_tile);
}

// Keys [*k_begin, *k_end) of key split z (split_chunk keys each, the last split the rest).
// The range may be empty (the general kernel then writes empty partials for the merge).
__device__ inline void split_key_range(const AttentionSplit& split, int kv_end, int keys_per_tile,
                                       int z, int* k_begin, int* k_end) {
  const int chunk = split_chunk(split, kv_end, keys_per_tile);
  *k_begin = z * chunk;
  *k_end = z + 1 == split.num_splits ? kv_end : min(kv_end, *k_begin + chunk);
}

// How many of the splits hold keys (at least 1): splits [0, split_count) do.
__device__ inline int split_count(const AttentionSplit& split, int kv_end, int keys_per_tile) {
  if (split.num_splits <= 1) return 1;
  const int chunk = split_chunk(split, kv_end, keys_per_tile);
  return max(1, min(split.num_splits, (kv_end + chunk - 1) / chunk));
}

// The (sequence, KV head g, query tile) a CTA owns and the keys [k_begin, k_end) of its key
// split. Rows r in [0, num_rows) are (token first + r / group, head g group + r % group).
struct PrefillWork {
  int b = -1, g = 0, group = 0;
  int q_begin = 0;  // the sequence's first query row in the batch
  int first = 0;    // the tile's first query token, within the sequence
  int num_rows = 0;
  int pos0 = 0;     // position of token `first`
  int kv_end = 0;   // keys [0, kv_end) are visible to some row
  int k_begin = 0, k_end = 0;
  // Position of row r (rows past num_rows see every key: zero queries, no NaN).
  __device__ int row_pos(int r) const { return r < num_rows ? pos0 + r / group : kv_end - 1; }
};

// The work of query tile `tile` of sequence b (b < 0: none), KV head g, key split z.
__device__ inline PrefillWork prefill_work_of(const PagedAttentionArgs& a, int group, int q_tile,
                                              const AttentionSplit& split, int keys_per_tile,
                                              int b, int tile, int g, int z) {
  PrefillWork w;
  w.b = b;
  if (w.b < 0) return w;
  w.g = g;
  w.group = group;
  w.q_begin = a.query_start_loc[w.b];
  const int q_len = a.query_start_loc[w.b + 1] - w.q_begin;
  w.first = tile * q_tile;
  const int num_tok = min(q_tile, q_len - w.first);
  w.num_rows = num_tok * group;
  w.pos0 = a.seq_lens[w.b] - q_len + w.first;
  w.kv_end = w.pos0 + num_tok;
  split_key_range(split, w.kv_end, keys_per_tile, z, &w.k_begin, &w.k_end);
  return w;
}

// Work item x of the query-tile axis of num_x (prefill_grid's x; the items ordered as
// find_prefill_work orders its CTAs), without a barrier: whole warps call it, and every lane
// gets the answer.
__device__ inline PrefillWork prefill_work_at(const PagedAttentionArgs& a, int group, int q_tile,
                                              int uniform_tiles, const AttentionSplit& split,
                                              int keys_per_tile, int num_x, int x, int g, int z) {
  int b, tile;
  if (uniform_tiles > 0) {
    b = x % a.num_seqs;
    tile = uniform_tiles - 1 - x / a.num_seqs;
  } else {
    const int2 r = locate_query_tile_all(a, q_tile, num_x - 1 - x);
    b = r.x;
    tile = r.y;
  }
  return prefill_work_of(a, group, q_tile, split, keys_per_tile, b, tile, g, z);
}

// Finds this CTA's work (blockIdx as in attention_prefill.cu's launcher); every thread of
// the CTA calls it (it holds a barrier). work.b < 0: nothing to do.
__device__ inline PrefillWork find_prefill_work(const PagedAttentionArgs& a, int group, int q_tile,
                                                int uniform_tiles, const AttentionSplit& split,
                                                int keys_per_tile) {
  __shared__ int s_seq, s_tile;
  const int tid = threadIdx.x;
  if (uniform_tiles > 0) {
    if (tid == 0) {
      s_seq = blockIdx.x % a.num_seqs;
      s_tile = uniform_tiles - 1 - static_cast<int>(blockIdx.x) / a.num_seqs;
    }
  } else if (tid < 32) {
    locate_query_tile(a, q_tile, gridDim.x - 1 - blockIdx.x, &s_seq, &s_tile);
  }
  __syncthreads();
  return prefill_work_of(a, group, q_tile, split, keys_per_tile, s_seq, s_tile, blockIdx.y,
                         blockIdx.z);
}

}  // namespace kestrel::kernels::detail
