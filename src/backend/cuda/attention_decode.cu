// Paged decode attention: one query token per sequence, streamed through registers at
// close to the KV cache's read bandwidth.
//
// Maths as in attention.cu: out[b, h] = sum_{j < seq_len} softmax_j(scale q[b, h] . K[b, j, g])
// V[b, j, g], g = h / G, fp32 accumulation, bf16 output.
//
// Why a separate kernel: the general kernel stages 32-key tiles through shared memory with
// two barriers and two warp reductions per tile and keeps only one tile (16 KB) in flight
// per CTA; decode spent ~9 us per tile there (26% of the copy rate). Here nothing in the key
// loop synchronises the CTA:
//
// - A CTA of 128 threads owns (sequence, KV head, key split) and all G query heads of the
//   group (kRows >= G rows, G <= 8), so each K/V byte is read from memory once.
// - A key's K (and V) row of D bf16 is read by kLanes = D / 8 adjacent lanes, 16 bytes
//   each (one coalesced 2 D-byte run per key), so the CTA reads kSlots = 128 / kLanes keys
//   per step. Each thread issues kSteps steps' K and V loads before using any
//   (kTile = kSlots kSteps keys, 32 KB at D = 128 and G <= 2, in flight per CTA), and the
//   block-table entries of the next tile are loaded while this tile's K/V are in flight.
// - q . k: each thread dots its 8 dims; a log2(kLanes)-step xor-shuffle sum within the key's
//   lanes gives every one of them the score.
// - Softmax: every thread keeps its own online softmax (max, sum, 8 dims of unnormalised
//   output per row) over the keys it loaded; no cross-thread traffic in the loop. At the end
//   the kSlots states of each (row, dim) are merged through shared memory, and the CTA
//   either writes the bf16 output or, when the keys are split (Flash-Decoding), the fp32
//   partial that attention.cu's merge kernel combines.
//
// Bytes: K and V of each (sequence, KV head) once, q and out once: the decode floor.
#include <cfloat>

#include "backend/cuda/attention_decode.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kv_layout.cuh"

namespace kestrel::kernels::detail {
namespace {

constexpr int kThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;

template <int D, int kRows>
struct DecodeGeom {
  static constexpr int kLanes = D / 8;               // lanes sharing one key, 16 bytes each
  static constexpr int kSlots = kThreads / kLanes;   // keys per step
  // Steps in flight: 8 keeps 32 KB per CTA in flight at D = 128; more rows need more
  // registers per key, so fewer steps. Small head dims already have 32-64 keys per step.
  static constexpr int kSteps = (kRows <= 2 ? 8 : 16 / kRows) / (D <= 32 ? 2 : 1);
  static constexpr int kTile = kSlots * kSteps;      // keys per loop iteration
  static constexpr int kMinCtas = kRows <= 2 ? kDecodeCtasPerSm : 2;
};

// 16 bytes from the KV cache: read once, so kept out of L1.
__device__ __forceinline__ uint4 load_stream(const bf16* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// 8 bf16 (one uint4) to fp32: a bf16 is the top half of the fp32 with the same bits.
__device__ __forceinline__ void unpack8(const uint4& u, float* f) {
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

template <int D, int kRows>
__global__ void __launch_bounds__(kThreads, DecodeGeom<D, kRows>::kMinCtas)
    decode_kernel(PagedAttentionArgs a, int group, AttentionSplit split, float* part_ml,
                  float* part_acc) {
  using G = DecodeGeom<D, kRows>;
  constexpr int kLanes = G::kLanes, kSlots = G::kSlots, kSteps = G::kSteps, kTile = G::kTile;
  __shared__ alignas(16) float s_acc[kRows][kSlots][D];  // 4 KB per row; float4 stores
  __shared__ float s_ml[kRows][kSlots][2];

  const int tid = threadIdx.x;
  const int slot = tid / kLanes;
  const int sub = tid % kLanes;  // owns dims [8 sub, 8 sub + 8)
  const int b = blockIdx.x;
  const int g = blockIdx.y;
  const int z = blockIdx.z;
  const int token = a.query_start_loc[b];
  const int seq_len = a.seq_lens[b];

  // Keys [k_begin, k_end): the split rule of kernels.h (AttentionSplit), in whole tiles.
  int k_begin = 0, k_end = seq_len;
  if (split.num_splits > 1) {
    const int even = (seq_len + split.num_splits - 1) / split.num_splits;
    const int chunk = max(split.kv_chunk, (even + kTile - 1) / kTile * kTile);
    k_begin = min(z * chunk, seq_len);
    k_end = z + 1 == split.num_splits ? seq_len : min(seq_len, k_begin + chunk);
  }

  const float qscale = a.scale * kLog2e;  // scores in the log2 domain
  float q[kRows][8];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (r < group) {
      const int64_t row = int64_t(token) * a.num_q_heads + g * group + r;
      unpack8(*reinterpret_cast<const uint4*>(a.q + row * D + sub * 8), q[r]);
#pragma unroll
      for (int e = 0; e < 8; ++e) q[r][e] *= qscale;
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) q[r][e] = 0.0f;  // padding row: computed, never written
    }
  }

  float m[kRows], l[kRows], acc[kRows][8];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    m[r] = -FLT_MAX;
    l[r] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[r][e] = 0.0f;
  }

  const int32_t* table = a.block_tables + int64_t(b) * a.max_blocks_per_seq;
  const int bs = a.block_size;
  int page[kSteps];  // block-table entries of this thread's keys in the next tile
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int j = k_begin + s * kSlots + slot;
    page[s] = j < k_end ? table[j / bs] : 0;
  }

  for (int base = k_begin; base < k_end; base += kTile) {
    uint4 kr[kSteps], vr[kSteps];
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int j = base + s * kSlots + slot;
      kr[s] = vr[s] = make_uint4(0, 0, 0, 0);
      if (j < k_end) {  // never read past the sequence: other slots may hold anything
        const int64_t off =
            (a.kv_head_major
                 ? kv_row_offset<true>(page[s], j % bs, g, a.num_kv_heads, bs, D)
                 : kv_row_offset<false>(page[s], j % bs, g, a.num_kv_heads, bs, D)) +
            sub * 8;
        kr[s] = load_stream(a.k_cache + off);
        vr[s] = load_stream(a.v_cache + off);
      }
    }
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {  // next tile's pages, in flight with this tile's K/V
      const int j = base + kTile + s * kSlots + slot;
      page[s] = j < k_end ? table[j / bs] : 0;
    }

    float sc[kSteps][kRows];
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      float kf[8];
      unpack8(kr[s], kf);
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
        if (base + s * kSlots + slot < k_end) mt = fmaxf(mt, sc[s][r]);
      }
      const float corr = exp2f(m[r] - mt);
      m[r] = mt;
      l[r] *= corr;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[r][e] *= corr;
    }
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const bool valid = base + s * kSlots + slot < k_end;
      float vf[8];
      unpack8(vr[s], vf);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float p = valid ? exp2f(sc[s][r] - m[r]) : 0.0f;
        l[r] += p;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[r][e] += p * vf[e];
      }
    }
  }

  // Merge the kSlots per-thread states of each (row, dim).
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    float4* dst = reinterpret_cast<float4*>(&s_acc[r][slot][sub * 8]);
    dst[0] = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
    dst[1] = make_float4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]);
    if (sub == 0) {
      s_ml[r][slot][0] = m[r];
      s_ml[r][slot][1] = l[r];
    }
  }
  __syncthreads();
  for (int i = tid; i < group * D; i += kThreads) {
    const int r = i / D;
    const int d = i % D;
    float mx = -FLT_MAX;
#pragma unroll
    for (int s = 0; s < kSlots; ++s) mx = fmaxf(mx, s_ml[r][s][0]);
    float sum = 0.0f, o = 0.0f;
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      const float w = exp2f(s_ml[r][s][0] - mx);  // 0 for slots that saw no key
      sum += s_ml[r][s][1] * w;
      o += s_acc[r][s][d] * w;
    }
    const int64_t row = int64_t(token) * a.num_q_heads + g * group + r;
    if (part_acc == nullptr) {
      a.out[row * D + d] = __float2bfloat16(o / sum);
    } else {
      const int64_t part = int64_t(z) * a.num_tokens * a.num_q_heads + row;
      if (d == 0) {
        part_ml[2 * part] = mx;
        part_ml[2 * part + 1] = sum;
      }
      part_acc[part * D + d] = o;
    }
  }
}

template <int D, int kRows>
void launch(const PagedAttentionArgs& a, const AttentionSplit& split, float* part_ml,
            float* part_acc, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.num_seqs), static_cast<unsigned>(a.num_kv_heads),
                  static_cast<unsigned>(split.num_splits));
  decode_kernel<D, kRows><<<grid, kThreads, 0, stream>>>(a, a.num_q_heads / a.num_kv_heads,
                                                          split, part_ml, part_acc);
  KS_CUDA_CHECK_LAUNCH("attention decode_kernel");
}

template <int D>
void launch_rows(const PagedAttentionArgs& a, const AttentionSplit& split, float* part_ml,
                 float* part_acc, cudaStream_t stream) {
  const int group = a.num_q_heads / a.num_kv_heads;
  if (group <= 1) return launch<D, 1>(a, split, part_ml, part_acc, stream);
  if (group <= 2) return launch<D, 2>(a, split, part_ml, part_acc, stream);
  if (group <= 4) return launch<D, 4>(a, split, part_ml, part_acc, stream);
  launch<D, 8>(a, split, part_ml, part_acc, stream);
}

}  // namespace

bool use_decode_kernel(const PagedAttentionArgs& a) {
  const int d = a.head_dim;
  return a.max_query_len == 1 && a.num_tokens == a.num_seqs &&
         a.num_q_heads / a.num_kv_heads <= kMaxDecodeGroup &&
         (d == 16 || d == 32 || d == 64 || d == 128);
}

void decode_attention(const PagedAttentionArgs& a, const AttentionSplit& split, float* part_ml,
                      float* part_acc, cudaStream_t stream) {
  switch (a.head_dim) {
    case 16: launch_rows<16>(a, split, part_ml, part_acc, stream); break;
    case 32: launch_rows<32>(a, split, part_ml, part_acc, stream); break;
    case 64: launch_rows<64>(a, split, part_ml, part_acc, stream); break;
    case 128: launch_rows<128>(a, split, part_ml, part_acc, stream); break;
    default: KS_CUDA_CHECK(cudaErrorInvalidValue);  // use_decode_kernel() said no
  }
}

}  // namespace kestrel::kernels::detail
