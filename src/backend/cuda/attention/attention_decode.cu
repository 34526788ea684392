// Paged decode attention: one query token per sequence, the KV cache streamed through a
// per-thread cp.async ring in shared memory at close to its read bandwidth.
//
// Maths as in attention.cu: out[b, h] = sum_{j < seq_len} softmax_j(scale q[b, h] . K[b, j, g])
// V[b, j, g], g = h / G, fp32 accumulation, bf16 output.
//
// Why a separate kernel: the general kernel stages 32-key tiles through shared memory with
// two barriers and two warp reductions per tile and keeps only one tile (16 KB) in flight
// per CTA; decode spent ~9 us per tile there (26% of the copy rate). Here nothing in the key
// loop synchronises the CTA:
//
// - A CTA of 128 threads owns (sequence, KV head, key split) and up to 8 query heads of the
//   group (kRows >= those heads), so each K/V byte is read from memory once per CTA. Groups
//   of 9..16 take two CTAs per KV head (DecodeRows), which read the same K/V; the second
//   read comes mostly from L2, as the two are adjacent in launch order.
// - A key's K (and V) row of D bf16 is read by kLanes = D / 8 adjacent lanes, 16 bytes each
//   (one coalesced 2 D-byte run per key), so the CTA covers kSlots = 128 / kLanes keys per
//   step and kTile = kSlots kSteps keys per tile.
// - Loads: each thread copies its own 16-byte pieces of K and V with cp.async into a ring of
//   kStages tiles in shared memory and reads back only what it copied itself, so waiting is
//   per thread (cp.async.wait_group) and needs no barrier. kStages - 1 tiles are in flight
//   while the thread computes on the oldest, so loads never stop for maths. The block-table
//   entries of the tile after the next one are loaded (into registers) a loop turn ahead.
//   The earlier version held one 8-step tile in registers instead, so each CTA's loads and
//   maths alternated: 80% of the copy rate at 256 x 1024 against 85% for this ring
//   (docs/cuda_backend.md).
// - q . k: each thread dots its 8 dims; a log2(kLanes)-step xor-shuffle sum within the key's
//   lanes gives every one of them the score.
// - Softmax: every thread keeps its own online softmax (max, sum, 8 dims of unnormalised
//   output per row) over the keys it loaded; no cross-thread traffic in the loop. At the end
//   the kSlots states of each (row, dim) are merged through shared memory (the ring's), and
//   the CTA either writes the bf16 output or, when the keys are split (Flash-Decoding), its
//   fp32 partial; the last CTA of the (sequence, KV head, part) to finish merges the
//   partials (attention_decode_merge.cuh), counted in by an atomic counter.
// - Fused (kFused, paged_attention_rope): q, k, v come from the qkv product; the q/k norm
//   and RoPE run in registers (attention_decode_rope.cuh), the CTA whose split holds the new
//   token stores its K/V and starts slot 0's state with it, and the cache loads are issued
//   before griddepcontrol.wait, overlapping the product before.
// - CTAs take the sequences in a.seq_order when given (longest first); a batch of several
//   CTA waves has the first half of that order cut into two halves each
//   (AttentionSplit::tail_seqs), so a wave ends on halves rather than on lone long sequences.
//
// Bytes: K and V of each (sequence, KV head) once (groups above 8: once from memory, once
// more from L2), q and out once: the decode floor.
#include <cfloat>
#include <type_traits>

#include "backend/cuda/attention/attention_decode.cuh"
#include "backend/cuda/attention/attention_decode_merge.cuh"
#include "backend/cuda/attention/attention_decode_rope.cuh"
#include "backend/cuda/attention/attention_tiles.cuh"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/attention/kv_fp8.cuh"
#include "backend/cuda/attention/kv_layout.cuh"

namespace kestrel::kernels::detail {
namespace {

constexpr int kThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;

template <int D, int kRows, bool kFp8 = false>
struct DecodeGeom {
  static constexpr int kLanes = D / 8;               // lanes sharing one key, 16 bytes each
  static constexpr int kSlots = kThreads / kLanes;   // keys per step
  // Steps per tile and tiles in the ring: 2 x 4 at D >= 64 keeps 3 tiles (24 KB) in flight per
  // CTA in 32 KB of ring, and 80 registers let 6 CTAs share an SM (144 KB in flight per SM).
  // Measured on an H200 at 256 x 1024: 2 x 4 0.295 ms, 4 x 3 0.310, 2 x 6 0.324, 4 x 4 0.358,
  // 8 x 3 0.422, 4 x 6 0.445. Small head dims already cover 32-64 keys per step.
  static constexpr int kSteps = D <= 32 ? 1 : 2;
  static constexpr int kStages = 4;
  static constexpr int kTile = kSlots * kSteps;      // keys per loop turn
  static constexpr int kStageVecs = kSteps * 2 * kThreads;  // copies per ring tile (K and V)
  static constexpr int kVecBytes = kFp8 ? 8 : 16;             // a lane's 8 dims of a key
  static constexpr int kRingBytes = kStages * kStageVecs * kVecBytes;
  // The end-of-loop merge reuses the ring: [kRows][kSlots][D] sums and [kRows][kSlots][2] (m, l).
  static constexpr int kMergeBytes = kRows * kSlots * D * 4 + kRows * kSlots * 2 * 4;
  static constexpr int kSmemBytes = kRingBytes > kMergeBytes ? kRingBytes : kMergeBytes;
  static constexpr int kMinCtas = kRows <= 4 ? 4 : 2;  // <= 128 / 255 registers
};

// blockIdx read afresh (asm volatile), so that the compiler does not keep an early value in a
// register through a loop to save recomputing it.
__device__ __forceinline__ int cta_index_x() {
  int v;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(v));
  return v;
}
__device__ __forceinline__ int cta_index_y() {
  int v;
  asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(v));
  return v;
}

// The sequence the CTAs at grid position x serve: longest first when the batch gives an
// order (a CTA wave then ends with the short sequences, not with a lone long one).
// A lone sequence skips the load: it would be one more link in the chain of dependent loads
// (order, length, block table) before the first K/V copy can be issued.
__device__ __forceinline__ int sequence_of(const PagedAttentionArgs& a, int x) {
  return a.seq_order != nullptr && a.num_seqs > 1 ? a.seq_order[x] : x;
}

// Which position of the batch (in seq_order) the CTAs at grid position x serve: with
// AttentionSplit::tail_seqs, positions 2i and 2i + 1 are the two halves of sequence i.
__device__ __forceinline__ int position_of(const AttentionSplit& split, int x) {
  if (split.tail_seqs == 0) return x;
  return x < 2 * split.tail_seqs ? x / 2 : x - split.tail_seqs;
}

// Returns the old value; release orders this thread's earlier writes (and, being cumulative,
// those a barrier ordered before it) before the add, acquire makes what other releasers
// published visible after it.
__device__ __forceinline__ int atomic_add_acq_rel(int* p, int v) {
  int old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

// kFused: q, k, v come from rope.qkv (paged_attention_rope); a separate instantiation, so
// that the plain kernel keeps its registers.
// A lane's 8 dims of a K or V row as copied: 8 bf16, or 8 e4m3 bytes (fp8 cache).
__device__ __forceinline__ void to_floats(const uint4& u, float* f) { unpack8(u, f); }
__device__ __forceinline__ void to_floats(const uint2& u, float* f) { fp8x8_to_float(u, f); }

// kFp8: the cache holds e4m3 bytes (KvQuant). K's scale folds into q and V's into the
// accumulators before the merge (powers of two: exact), so the key loop works on the bytes'
// values; the fused path stores the new token's K/V as bytes and uses their read-back values.
template <int D, int kRows, bool kFused, bool kFp8>
__global__ void __launch_bounds__(kThreads, DecodeGeom<D, kRows, kFp8>::kMinCtas)
    decode_kernel(PagedAttentionArgs a, QkNormRopeArgs rope, DecodeRows gr, AttentionSplit split,
                  float* part_ml, float* part_acc) {
  using G = DecodeGeom<D, kRows, kFp8>;
  using Vec = std::conditional_t<kFp8, uint2, uint4>;
  using Elem = std::conditional_t<kFp8, uint8_t, bf16>;
  constexpr int kLanes = G::kLanes, kSlots = G::kSlots, kSteps = G::kSteps;
  constexpr int kStages = G::kStages, kTile = G::kTile, kStageVecs = G::kStageVecs;
  extern __shared__ uint4 ring_raw[];
  Vec* const ring = reinterpret_cast<Vec*>(ring_raw);  // [kStages][kSteps][K, V][kThreads]
  __shared__ int s_last, s_splits;

  // With rope (fused), the new token's q, k, v come from the qkv product and everything
  // before it in the cache was written by earlier steps, so the cache loads start before
  // pdl_wait() and overlap the product's tail. Only the inputs (metadata) are read before it.
  if constexpr (!kFused) {
    pdl_wait();  // launch.cuh: before touching what earlier kernels write
    pdl_trigger();
  }
  const int tid = threadIdx.x;
  const int slot = tid / kLanes;
  const int sub = tid % kLanes;  // owns dims [8 sub, 8 sub + 8)
  const int part = blockIdx.x % gr.parts;
  const int g = blockIdx.y;
  const int x = blockIdx.x / gr.parts;
  int z = blockIdx.z;
  AttentionSplit sp = split;  // this sequence's: with tail_seqs, two halves or whole
  if (split.tail_seqs > 0) {
    if (x < 2 * split.tail_seqs) {
      z = x % 2;
    } else {
      sp.num_splits = 1;
    }
  }
  const int b = sequence_of(a, position_of(split, x));
  const int head0 = g * gr.group + part * gr.rows;  // this CTA's first query head
  const int num_rows = min(gr.rows, gr.group - part * gr.rows);
  // One query token per sequence (use_decode_kernel: num_tokens == num_seqs, max_query_len
  // 1), so sequence b's token is row b: no load of query_start_loc.
  const int token = b;
  const int seq_len = a.seq_lens[b];
  // The first tiles' block-table entries for where a split starts when its chunk is the
  // plan's smallest (z kv_chunk: always for z = 0, and for every split of a sequence short
  // enough, e.g. single stream up to 1,536 keys), loaded together with the sequence length
  // rather than after it: one round trip less (~1 us while the product before streams its
  // weights) before the first K/V copy. Used only if the guess was right.
  const int32_t* table = a.block_tables + int64_t(b) * a.max_blocks_per_seq;
  const int bs = a.block_size;
  const int guess_begin = sp.num_splits > 1 ? z * sp.kv_chunk : 0;
  int pages[kStages - 1][kSteps];
#pragma unroll
  for (int t = 0; t < kStages - 1; ++t) {
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int blk = (guess_begin + t * kTile + s * kSlots + slot) / bs;
      pages[t][s] = blk < a.max_blocks_per_seq ? table[blk] : 0;
    }
  }
  const int num_active = split_count(sp, seq_len, kTile);
  if (tid == 0) s_splits = num_active;
  if (z >= num_active) {  // no keys here (a plan made for longer sequences)
    if constexpr (kFused) pdl_wait();
    return;
  }
  int k_begin, k_end;  // keys [k_begin, k_end): the split rule of kernels.h (AttentionSplit)
  split_key_range(sp, seq_len, kTile, z, &k_begin, &k_end);
  // Fused: the last key (the new token's) is not in the cache yet; the last split adds it.
  const bool owns_new = kFused && k_end == seq_len;
  const int cache_end = owns_new ? seq_len - 1 : k_end;
  const int num_tiles = cache_end > k_begin ? (cache_end - k_begin + kTile - 1) / kTile : 0;

  auto load_pages = [&](int t, int* pages) {  // block-table entries of this thread's keys
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int j = k_begin + t * kTile + s * kSlots + slot;
      pages[s] = j < cache_end ? table[j / bs] : 0;
    }
  };
  auto issue = [&](int t, const int* pages) {  // tile t into ring stage t % kStages
    if (t < num_tiles) {
      Vec* stage = ring + (t % kStages) * kStageVecs;
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        const int j = k_begin + t * kTile + s * kSlots + slot;
        const bool valid = j < cache_end;  // never read past the keys: other slots hold anything
        int64_t off = 0;
        if (valid) {
          off = (a.kv_head_major
                     ? kv_row_offset<true>(pages[s], j % bs, g, a.num_kv_heads, bs, D)
                     : kv_row_offset<false>(pages[s], j % bs, g, a.num_kv_heads, bs, D)) +
                sub * 8;
        }
        const Elem* k_src = static_cast<const Elem*>(a.k_cache) + off;
        const Elem* v_src = static_cast<const Elem*>(a.v_cache) + off;
        if constexpr (kFp8) {
          cp_async_8(stage + (2 * s) * kThreads + tid, k_src, valid);
          cp_async_8(stage + (2 * s + 1) * kThreads + tid, v_src, valid);
        } else {
          cp_async_16<CopyCache::kL2Prefetch256>(stage + (2 * s) * kThreads + tid, k_src, valid);
          cp_async_16<CopyCache::kL2Prefetch256>(stage + (2 * s + 1) * kThreads + tid, v_src, valid);
        }
      }
    }
    cp_async_commit();  // an empty group past the end keeps the wait counts uniform
  };

  // Tiles 0 .. kStages - 2 in flight before anything else.
  if (k_begin != guess_begin) {
#pragma unroll
    for (int t = 0; t < kStages - 1; ++t) load_pages(t, pages[t]);
  }
#pragma unroll
  for (int t = 0; t < kStages - 1; ++t) issue(t, pages[t]);
  int next_pages[kSteps];  // of the next tile to issue
  load_pages(kStages - 1, next_pages);
  // The rope's inputs and weights (no kernel writes them) before the wait, too.
  RopeRow rr;
  if constexpr (kFused) {
    rr.load<kLanes>(rope, token, sub);
    pdl_wait();
    pdl_trigger();
  }

  // q rows (and with rope, the new token's k and v rows) of this CTA's heads.
  const int64_t qkv_stride = int64_t(a.num_q_heads + 2 * a.num_kv_heads) * D;
  // Scores in the log2 domain; an fp8 cache's K scale too (scores from K's bytes).
  const float qscale = a.scale * kLog2e * (kFp8 ? a.kv.scale[g] : 1.0f);
  float q[kRows][8];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int head = head0 + min(r, num_rows - 1);  // padding rows: computed, never written
    const bf16* src = kFused ? rope.qkv + token * qkv_stride + head * D
                            : a.q + (int64_t(token) * a.num_q_heads + head) * D;
    unpack8(*reinterpret_cast<const uint4*>(src + sub * 8), q[r]);
  }
  uint4 k_raw, v_raw;  // the new token's, when this CTA owns it
  if (owns_new) {
    const bf16* k_src = rope.qkv + token * qkv_stride + (a.num_q_heads + g) * D + sub * 8;
    k_raw = *reinterpret_cast<const uint4*>(k_src);
    v_raw = *reinterpret_cast<const uint4*>(k_src + a.num_kv_heads * D);
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if constexpr (kFused) norm_rope8<kLanes, false>(q[r], rope.q_norm != nullptr, true, false, rope.eps, rr, sub);
#pragma unroll
    for (int e = 0; e < 8; ++e) q[r][e] *= qscale;
  }
  float m[kRows], l[kRows], acc[kRows][8];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    m[r] = -FLT_MAX;
    l[r] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[r][e] = 0.0f;
  }
  if (owns_new) {  // the new token's key first: into the cache and into slot 0's state
    float kf[8], vf[8];
    unpack8(k_raw, kf);
    unpack8(v_raw, vf);
    norm_rope8<kLanes, false>(kf, rope.k_norm != nullptr, false, false, rope.eps, rr, sub);
    // One CTA of the group stores it. The offset is found inside each branch's test, as
    // before the fp8 path existed: hoisted out, it kept registers live that cost the bf16
    // kernel a CTA per SM (96 -> 102 registers, 5 -> 4 CTAs at D = 128, group 2).
    const bool store = part == 0 && slot == 0 && rr.kv_slot >= 0;
    auto new_row = [&] {
      const int kv_slot = rr.kv_slot;
      return (a.kv_head_major
                  ? kv_row_offset<true>(kv_slot / bs, kv_slot % bs, g, a.num_kv_heads, bs, D)
                  : kv_row_offset<false>(kv_slot / bs, kv_slot % bs, g, a.num_kv_heads, bs, D)) +
             sub * 8;
    };
    if constexpr (kFp8) {  // stored as bytes; kf and vf become the bytes' values
      float amax_k = 0.0f, amax_v = 0.0f;
      int clamped_k = 0, clamped_v = 0;
      const uint2 kq = quantize8(kf, 1.0f / a.kv.scale[g], amax_k, clamped_k);
      const uint2 vq = quantize8(vf, 1.0f / a.kv.scale[a.num_kv_heads + g], amax_v, clamped_v);
      if (store) {
        const int64_t off = new_row();
        *reinterpret_cast<uint2*>(static_cast<uint8_t*>(rope.k_cache) + off) = kq;
        *reinterpret_cast<uint2*>(static_cast<uint8_t*>(rope.v_cache) + off) = vq;
        raise_amax(rope.kv.amax + g, amax_k);
        raise_amax(rope.kv.amax + a.num_kv_heads + g, amax_v);
        count_clamped(rope.kv.clamped + g, clamped_k);
        count_clamped(rope.kv.clamped + a.num_kv_heads + g, clamped_v);
      }
    } else if (store) {
      const int64_t off = new_row();
      *reinterpret_cast<uint4*>(static_cast<bf16*>(rope.k_cache) + off) = pack8(kf);
      *reinterpret_cast<uint4*>(static_cast<bf16*>(rope.v_cache) + off) = v_raw;
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float lo = q[r][0] * kf[0] + q[r][1] * kf[1] + q[r][2] * kf[2] + q[r][3] * kf[3];
      const float hi = q[r][4] * kf[4] + q[r][5] * kf[5] + q[r][6] * kf[6] + q[r][7] * kf[7];
      float sc = lo + hi;
#pragma unroll
      for (int o = kLanes / 2; o > 0; o >>= 1) sc += __shfl_xor_sync(0xffffffffu, sc, o);
      if (slot == 0) {  // p = 2^(sc - m) = 1
        m[r] = sc;
        l[r] = 1.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[r][e] = vf[e];
      }
    }
  }

  for (int t = 0; t < num_tiles; ++t) {
    issue(t + kStages - 1, next_pages);  // into the stage tile t - 1 used
    load_pages(t + kStages, next_pages);
    cp_async_wait<kStages - 1>();  // tile t has landed (this thread's own copies)
    const Vec* stage = ring + (t % kStages) * kStageVecs;
    const int base = k_begin + t * kTile;

    float sc[kSteps][kRows];
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      float kf[8];
      to_floats(stage[(2 * s) * kThreads + tid], kf);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float lo = q[r][0] * kf[0] + q[r][1] * kf[1] + q[r][2] * kf[2] + q[r][3] * kf[3];
        const float hi = q[r][4] * kf[4] + q[r][5] * kf[5] + q[r][6] * kf[6] + q[r][7] * kf[7];
        sc[s][r] = lo + hi;
      }
    }
#pragma unroll
    for (int o = kLanes / 2; o > 0; o >>= 1) {
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) sc[s][r] += __shfl_xor_sync(0xffffffffu, sc[s][r], o);
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float mt = m[r];
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        if (base + s * kSlots + slot < cache_end) mt = fmaxf(mt, sc[s][r]);
      }
      const float corr = exp2f(m[r] - mt);
      m[r] = mt;
      l[r] *= corr;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[r][e] *= corr;
    }
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const bool valid = base + s * kSlots + slot < cache_end;
      float vf[8];
      to_floats(stage[(2 * s + 1) * kThreads + tid], vf);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float p = valid ? exp2f(sc[s][r] - m[r]) : 0.0f;
        l[r] += p;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[r][e] += p * vf[e];
      }
    }
  }

  // Merge the kSlots per-thread states of each (row, dim) in the ring's memory.
  cp_async_wait<0>();
  if constexpr (kFp8) {
    const float v_scale = a.kv.scale[a.num_kv_heads + g];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[r][e] *= v_scale;
    }
  }
  __syncthreads();
  float* s_acc = reinterpret_cast<float*>(ring);  // [kRows][kSlots][D]
  float* s_ml = s_acc + kRows * kSlots * D;       // [kRows][kSlots][2]
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    float4* dst = reinterpret_cast<float4*>(s_acc + (r * kSlots + slot) * D + sub * 8);
    dst[0] = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
    dst[1] = make_float4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]);
    if (sub == 0) {
      s_ml[(r * kSlots + slot) * 2] = m[r];
      s_ml[(r * kSlots + slot) * 2 + 1] = l[r];
    }
  }
  __syncthreads();
  // Each slot's weight 2^(m_s - M) once per (row, slot), written over its m: per output
  // element (kSlots exp2f each) it cost ~1 us of the batch-1 kernel's critical path.
  constexpr int kWeights = kRows * kSlots, kPerThread = (kWeights + kThreads - 1) / kThreads;
  __shared__ float s_max[kRows];
  float w[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int i = tid + k * kThreads;  // (row, slot) = (i / kSlots, i % kSlots)
    if (i < kWeights) {
      const float* ml = s_ml + (i / kSlots) * kSlots * 2;
      float mx = -FLT_MAX;
#pragma unroll 8
      for (int s = 0; s < kSlots; ++s) mx = fmaxf(mx, ml[2 * s]);
      w[k] = exp2f(s_ml[2 * i] - mx);  // 0 for slots that saw no key
      if (i % kSlots == 0) s_max[i / kSlots] = mx;
    }
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    if (tid + k * kThreads < kWeights) s_ml[2 * (tid + k * kThreads)] = w[k];
  }
  __syncthreads();
  const int64_t rows = int64_t(a.num_tokens) * a.num_q_heads;
  // A sequence whose keys all fell to this CTA needs no partials and no merge.
  const bool direct = part_acc == nullptr || s_splits == 1;
#pragma unroll 1
  for (int i = tid; i < num_rows * D; i += kThreads) {
    const int r = i / D;
    const int d = i % D;
    const float* ml = s_ml + r * kSlots * 2;  // (weight, l) per slot
    const float mx = s_max[r];
    float sum = 0.0f, o = 0.0f;
#pragma unroll 8
    for (int s = 0; s < kSlots; ++s) {
      sum += ml[2 * s + 1] * ml[2 * s];
      o += s_acc[(r * kSlots + s) * D + d] * ml[2 * s];
    }
    const int64_t row = int64_t(token) * a.num_q_heads + head0 + r;
    if (direct) {
      a.out[row * D + d] = __float2bfloat16(o / sum);
    } else {
      const int64_t p = z * rows + row;
      if (d == 0) {
        part_ml[2 * p] = mx;
        part_ml[2 * p + 1] = sum;
      }
      part_acc[p * D + d] = o;
    }
  }
  if (direct) return;

  // Split keys: the last CTA of this (sequence, KV head, part) to finish merges the partials
  // of every split that holds keys (the counter goes back to zero for the next launch).
  // What only this tail needs is found again here (the CTA index) or kept in shared memory
  // (the split count) rather than in registers through the key loop (11 more registers would
  // leave 5 CTAs per SM instead of 6 at D = 128, group 2).
  __syncthreads();  // every thread's partials are written
  if (tid == 0) {
    const int bx = cta_index_x();
    const int pos = position_of(split, bx / gr.parts);
    int* counter = a.split_counters + (int64_t(pos) * gr.parts + bx % gr.parts) * a.num_kv_heads + cta_index_y();
    // One acq_rel atomic (the pattern of CUTLASS's semaphore): it publishes the partials the
    // barrier ordered before it, and for the last CTA makes every other CTA's visible. A
    // __threadfence() before a relaxed atomicAdd was one more round trip to L2.
    s_last = atomic_add_acq_rel(counter, 1) == s_splits - 1;
    if (s_last) *counter = 0;  // every split has counted itself in
  }
  __syncthreads();
  if (!s_last) return;
  merge_splits<D, kRows, kThreads, G::kSmemBytes>(a, s_splits, rows, int64_t(token) * a.num_q_heads + head0, num_rows,
                         part_ml, part_acc, reinterpret_cast<float*>(ring));
}

template <int D, int kRows, bool kFused, bool kFp8>
void launch(const PagedAttentionArgs& a, const QkNormRopeArgs& rope, const DecodeRows& gr,
            const AttentionSplit& split, float* part_ml, float* part_acc, cudaStream_t stream) {
  constexpr int kSmem = DecodeGeom<D, kRows, kFp8>::kSmemBytes;
  constexpr auto kernel = decode_kernel<D, kRows, kFused, kFp8>;
  if constexpr (kSmem > 48 * 1024) allow_dynamic_smem<kernel>(kSmem);
  // x = sequence-major, so the CTAs of one group's parts are adjacent (share K/V through L2).
  // tail_seqs: one grid position per whole sequence and two per halved one, z = 1.
  const dim3 grid(static_cast<unsigned>((a.num_seqs + split.tail_seqs) * gr.parts),
                  static_cast<unsigned>(a.num_kv_heads),
                  static_cast<unsigned>(split.tail_seqs > 0 ? 1 : split.num_splits));
  launch_pdl("attention decode_kernel", kernel, grid, kThreads, kSmem, stream, a, rope, gr, split,
             part_ml, part_acc);
  KS_CUDA_CHECK_LAUNCH("attention decode_kernel");
}

template <int D, int kRows, bool kFused, bool kFp8>
int ctas_per_sm() {
  static const int ctas = [] {
    int n = 0;
    KS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &n, decode_kernel<D, kRows, kFused, kFp8>, kThreads, DecodeGeom<D, kRows, kFp8>::kSmemBytes));
    return n;
  }();
  return ctas;
}

template <int N>
using Int = std::integral_constant<int, N>;

// Calls f(Int<D>, Int<kRows>, std::bool_constant<kFused>, std::bool_constant<kFp8>) for the
// instantiation that serves `a`: its head dim, its group's rows per CTA rounded up to 1, 2, 4
// or 8, plain or fused, bf16 or fp8 cache.
template <typename F>
auto with_decode_kernel(const PagedAttentionArgs& a, bool fused, F&& f) {
  auto by_rows = [&](auto d, auto kf, auto k8) {
    const int rows = decode_rows(a).rows;
    if (rows <= 1) return f(d, Int<1>{}, kf, k8);
    if (rows <= 2) return f(d, Int<2>{}, kf, k8);
    if (rows <= 4) return f(d, Int<4>{}, kf, k8);
    return f(d, Int<8>{}, kf, k8);
  };
  auto by_dim = [&](auto kf, auto k8) {
    switch (a.head_dim) {
      case 16: return by_rows(Int<16>{}, kf, k8);
      case 32: return by_rows(Int<32>{}, kf, k8);
      case 64: return by_rows(Int<64>{}, kf, k8);
      case 128: break;
      default: KS_CUDA_CHECK(cudaErrorInvalidValue);  // use_decode_kernel() said no
    }
    return by_rows(Int<128>{}, kf, k8);
  };
  auto by_cache = [&](auto kf) {
    return a.kv.fp8 ? by_dim(kf, std::true_type{}) : by_dim(kf, std::false_type{});
  };
  return fused ? by_cache(std::true_type{}) : by_cache(std::false_type{});
}

}  // namespace

DecodeRows decode_rows(const PagedAttentionArgs& a) {
  DecodeRows r;
  r.group = a.num_q_heads / a.num_kv_heads;
  r.parts = (r.group + kMaxDecodeRows - 1) / kMaxDecodeRows;
  r.rows = (r.group + r.parts - 1) / r.parts;
  return r;
}

bool use_decode_kernel(const PagedAttentionArgs& a) {
  const int d = a.head_dim;
  return a.max_query_len == 1 && a.num_tokens == a.num_seqs &&
         a.num_q_heads / a.num_kv_heads <= kMaxDecodeGroup &&
         (d == 16 || d == 32 || d == 64 || d == 128);
}

int decode_ctas_per_sm(const PagedAttentionArgs& a, bool rope) {
  return with_decode_kernel(a, rope, [](auto d, auto rows, auto fused, auto fp8) {
    return ctas_per_sm<decltype(d)::value, decltype(rows)::value, decltype(fused)::value,
                       decltype(fp8)::value>();
  });
}

void decode_attention(const PagedAttentionArgs& a, const QkNormRopeArgs& rope,
                      const AttentionSplit& split, float* part_ml, float* part_acc,
                      cudaStream_t stream) {
  const DecodeRows gr = decode_rows(a);
  with_decode_kernel(a, rope.qkv != nullptr, [&](auto d, auto rows, auto fused, auto fp8) {
    launch<decltype(d)::value, decltype(rows)::value, decltype(fused)::value, decltype(fp8)::value>(
        a, rope, gr, split, part_ml, part_acc, stream);
  });
}

}  // namespace kestrel::kernels::detail
