// Decode attention over an fp8 (e4m3) cache on the tensor cores.
//
// Maths as in attention.cu, for one query token per sequence: out[b, h] = sum_j softmax_j(
// scale q[b, h] . K[b, j, g]) V[b, j, g], g = h / G, K and V the bytes' values x their (K or V,
// KV head) scale (kernels.h, KvQuant), fp32 accumulation, bf16 output.
//
// Why: the CUDA-core decode kernel (attention_decode.cu) is bound by instruction issue, not
// by bytes: every element of K and V costs an FMA per query row of the group plus its
// conversion, so halving the bytes (e4m3) left its time unchanged (docs/cuda_backend.md).
// Here the group's query heads are the rows of an m16n8k16 tile (G <= 16 rows, the rest
// zero), so the FMAs go to the tensor cores and an element costs its conversion alone:
// e4m3 pairs convert to f16 pairs in one instruction (exactly: f16 holds every e4m3 value),
// so the products are f16 x f16 with fp32 accumulation, q rounded from bf16 to f16 once.
//
// Geometry. A CTA of 4 warps owns (sequence, KV head, key split); warp w takes the CTA's
// 16-key tiles w, w + 4, ... with its own online softmax over all 16 rows, and the four
// states are merged through shared memory at the end.
// - Each warp streams its tiles through its own ring of kStages tiles in shared memory
//   (cp.async, 16 bytes = 16 dims per copy; kStages - 1 tiles in flight), so the key loop
//   synchronises the warp only (__syncwarp), never the CTA.
// - S [16 rows, 16 keys] = Q K^T: Q's f16 fragments stay in registers for the whole loop;
//   K's come straight from the e4m3 rows, one 32-bit read and two conversions per fragment.
//   The head dims are permuted within each k-step (lane quad c takes dims 4c..4c+3 of the
//   16, so its two fragment registers are one 4-byte read) and Q is loaded with the same
//   permutation, which a dot product does not notice. K rows are padded to D + 16 bytes, so
//   the eight keys a fragment read touches fall in distinct banks.
// - O [16, D] += P V: P is the S accumulators rounded to f16 (P <= 1: 11 significant bits);
//   V needs its keys along the fragment's k, which e4m3 rows do not give, so each tile's V is
//   converted once into an f16 tile that ldmatrix.trans reads, as the prefill kernel does.
// - K's scale folds into the exponent's scale and V's into the output (powers of two: exact).
//
// Splits (Flash-Decoding) as the general kernel's (kernels.h, AttentionSplit): with
// num_splits > 1 every CTA writes its rows' partials (log2-domain max, sum, unnormalised
// output; empty splits write empty ones) and attention.cu's merge kernel combines them.
#include <cfloat>

#include "backend/cuda/attention/attention_decode.cuh"
#include "backend/cuda/attention/attention_tiles.cuh"
#include "backend/cuda/attention/kv_fp8.cuh"
#include "backend/cuda/attention/kv_layout.cuh"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma.cuh"

namespace kestrel::kernels::detail {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kKeys = 16;   // keys per warp tile
constexpr int kStages = 4;  // tiles in a warp's ring
constexpr int kKPad = 16;   // bytes of padding per K row
constexpr int kVPad = 8;    // f16 of padding per converted V row
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
struct alignas(16) WarpRing {
  uint8_t k[kStages][kKeys][D + kKPad];
  uint8_t v[kStages][kKeys][D];
  __half vh[kKeys][D + kVPad];  // the current tile's V as f16
};

template <int D>
struct MergeSmem {  // reuses the rings once every warp is done
  float o[kWarps][16][D];
  float m[kWarps][16];
  float l[kWarps][16];
};

template <int D>
constexpr int smem_bytes() {
  const int ring = int(sizeof(WarpRing<D>)) * kWarps;
  const int merge = int(sizeof(MergeSmem<D>));
  return ring > merge ? ring : merge;
}

__device__ __forceinline__ uint32_t fp8x2_to_f16x2(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}

// Two bf16 values (low first) as an f16 pair.
__device__ __forceinline__ uint32_t bf16x2_to_f16x2(uint32_t two) {
  const __half2 h = __floats2half2_rn(__uint_as_float(two << 16), __uint_as_float(two & 0xffff0000u));
  return *reinterpret_cast<const uint32_t*>(&h);
}

template <int D, bool kHeadMajor>
__global__ void __launch_bounds__(kThreads, 2)
    decode_mma_kernel(PagedAttentionArgs a, int group, AttentionSplit split, float* part_ml,
                      float* part_acc) {
  pdl_wait();  // launch.cuh: before touching what earlier kernels write
  pdl_trigger();
  constexpr int kKSteps = D / 16;  // k-steps of Q K^T
  constexpr int kONb = D / 8;      // n-blocks of O
  constexpr int kChunks = D / 16;  // 16-byte copies per e4m3 row
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int quad = lane / 4, c = lane % 4;  // fragment row group and column pair
  WarpRing<D>& ring = reinterpret_cast<WarpRing<D>*>(smem_raw)[warp];

  const int x = blockIdx.x;
  const int b = a.seq_order != nullptr && a.num_seqs > 1 ? a.seq_order[x] : x;
  const int g = blockIdx.y;
  const int z = blockIdx.z;
  const int seq_len = a.seq_lens[b];
  const int64_t rows_total = int64_t(a.num_tokens) * a.num_q_heads;
  const int64_t row0 = int64_t(b) * a.num_q_heads + g * group;  // token b: one per sequence
  const float k_scale = a.kv.scale[g], v_scale = a.kv.scale[a.num_kv_heads + g];
  const float qscale = a.scale * kLog2e * k_scale;

  const int num_active = split_count(split, seq_len, kKeys);
  int k_begin = 0, k_end = 0;
  if (z < num_active) split_key_range(split, seq_len, kKeys, z, &k_begin, &k_end);
  const int num_tiles = k_end > k_begin ? (k_end - k_begin + kKeys - 1) / kKeys : 0;
  const int my_tiles = num_tiles > warp ? (num_tiles - warp + kWarps - 1) / kWarps : 0;

  const int32_t* table = a.block_tables + int64_t(b) * a.max_blocks_per_seq;
  const auto* kc = static_cast<const uint8_t*>(a.k_cache);
  const auto* vc = static_cast<const uint8_t*>(a.v_cache);
  const int bs = a.block_size;
  // The warp's i-th tile (the CTA's tile warp + 4 i) into stage i % kStages; an empty commit
  // past the end keeps the wait counts uniform.
  auto issue = [&](int i) {
    if (i < my_tiles) {
      const int key0 = k_begin + (warp + kWarps * i) * kKeys;
      const int s = i % kStages;
#pragma unroll
      for (int n = 0; n < kKeys * kChunks / 32; ++n) {
        const int item = lane + 32 * n;
        const int r = item / kChunks, part = item % kChunks;
        const int j = key0 + r;
        const bool valid = j < k_end;
        int64_t off = 0;
        if (valid) {
          off = kv_row_offset<kHeadMajor>(table[j / bs], j % bs, g, a.num_kv_heads, bs, D) +
                part * 16;
        }
        cp_async_16(&ring.k[s][r][part * 16], kc + off, valid);
        cp_async_16(&ring.v[s][r][part * 16], vc + off, valid);
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) issue(i);

  // Q's A fragments, dims permuted per k-step: register e of k-step ks holds row quad (e even)
  // or quad + 8 (e odd), dims 16 ks + 4 c + (e < 2 ? 0 : 2) and the next; rows >= group are 0.
  uint32_t qa[kKSteps][4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = quad + 8 * h;
    const bf16* q = a.q + (row0 + min(r, group - 1)) * D;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      const uint2 four = *reinterpret_cast<const uint2*>(q + 16 * ks + 4 * c);
      qa[ks][h] = r < group ? bf16x2_to_f16x2(four.x) : 0u;
      qa[ks][2 + h] = r < group ? bf16x2_to_f16x2(four.y) : 0u;
    }
  }

  float o[kONb][4];
#pragma unroll
  for (int nb = 0; nb < kONb; ++nb) o[nb][0] = o[nb][1] = o[nb][2] = o[nb][3] = 0.0f;
  float m[2] = {-FLT_MAX, -FLT_MAX}, l[2] = {0.0f, 0.0f};  // rows quad and quad + 8

  for (int i = 0; i < my_tiles; ++i) {
    issue(i + kStages - 1);
    cp_async_wait<kStages - 1>();
    __syncwarp();  // every lane's copies of tile i visible to the warp
    const int s = i % kStages;
    const int key0 = k_begin + (warp + kWarps * i) * kKeys;

    // V to f16 for ldmatrix.trans: 8 dims per item.
#pragma unroll
    for (int n = 0; n < kKeys * D / 8 / 32; ++n) {
      const int item = lane + 32 * n;
      const int r = item / (D / 8), col = (item % (D / 8)) * 8;
      const uint2 e = *reinterpret_cast<const uint2*>(&ring.v[s][r][col]);
      uint4 h;
      h.x = fp8x2_to_f16x2(e.x & 0xffffu);
      h.y = fp8x2_to_f16x2(e.x >> 16);
      h.z = fp8x2_to_f16x2(e.y & 0xffffu);
      h.w = fp8x2_to_f16x2(e.y >> 16);
      *reinterpret_cast<uint4*>(&ring.vh[r][col]) = h;
    }

    // S = Q K^T over the tile's two n-blocks of 8 keys.
    float sc[2][4] = {};
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
#pragma unroll
      for (int nb = 0; nb < 2; ++nb) {
        const uint32_t four = *reinterpret_cast<const uint32_t*>(&ring.k[s][nb * 8 + quad][16 * ks + 4 * c]);
        mma_f16(sc[nb], qa[ks][0], qa[ks][1], qa[ks][2], qa[ks][3], fp8x2_to_f16x2(four & 0xffffu),
                fp8x2_to_f16x2(four >> 16));
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
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = fmaxf(m[h], fmaxf(fmaxf(sc[0][2 * h], sc[0][2 * h + 1]), fmaxf(sc[1][2 * h], sc[1][2 * h + 1])));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float corr = exp2_ftz((m[h] - mx) * qscale);
      m[h] = mx;
      const float shift = mx * qscale;
      float sum = 0.0f;
#pragma unroll
      for (int nb = 0; nb < 2; ++nb) {
        sc[nb][2 * h] = exp2_ftz(fmaf(sc[nb][2 * h], qscale, -shift));
        sc[nb][2 * h + 1] = exp2_ftz(fmaf(sc[nb][2 * h + 1], qscale, -shift));
        sum += sc[nb][2 * h] + sc[nb][2 * h + 1];
      }
      l[h] = l[h] * corr + sum;
#pragma unroll
      for (int nb = 0; nb < kONb; ++nb) {
        o[nb][2 * h] *= corr;
        o[nb][2 * h + 1] *= corr;
      }
    }

    __syncwarp();  // the f16 V tile complete
    // O += P V: the S accumulators are P's A fragment (keys 0..7 then 8..15).
    const __half2 p0 = __floats2half2_rn(sc[0][0], sc[0][1]), p1 = __floats2half2_rn(sc[0][2], sc[0][3]);
    const __half2 p2 = __floats2half2_rn(sc[1][0], sc[1][1]), p3 = __floats2half2_rn(sc[1][2], sc[1][3]);
    const uint32_t pa0 = *reinterpret_cast<const uint32_t*>(&p0), pa1 = *reinterpret_cast<const uint32_t*>(&p1);
    const uint32_t pa2 = *reinterpret_cast<const uint32_t*>(&p2), pa3 = *reinterpret_cast<const uint32_t*>(&p3);
#pragma unroll
    for (int db = 0; db < D / 16; ++db) {
      // Matrices: keys [0, 8) dims [0, 8), keys [8, 16) dims [0, 8), then dims [8, 16).
      uint32_t vf[4];
      ldmatrix_x4_trans(vf, &ring.vh[lane % 8 + ((lane / 8) % 2) * 8][db * 16 + (lane / 16) * 8]);
      mma_f16(o[2 * db], pa0, pa1, pa2, pa3, vf[0], vf[1]);
      mma_f16(o[2 * db + 1], pa0, pa1, pa2, pa3, vf[2], vf[3]);
    }
    __syncwarp();  // done with stage s and the f16 tile before they are refilled
  }
  cp_async_wait<0>();

  // Merge the four warps' states: row r's weight per warp is 2^((m_w - M) qscale).
  __syncthreads();
  MergeSmem<D>& mg = *reinterpret_cast<MergeSmem<D>*>(smem_raw);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = l[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int r = quad + 8 * h;
    if (c == 0) {
      mg.m[warp][r] = m[h];
      mg.l[warp][r] = sum;
    }
#pragma unroll
    for (int nb = 0; nb < kONb; ++nb) {
      *reinterpret_cast<float2*>(&mg.o[warp][r][nb * 8 + 2 * c]) = make_float2(o[nb][2 * h], o[nb][2 * h + 1]);
    }
  }
  __syncthreads();
  for (int i = tid; i < group * D; i += kThreads) {
    const int r = i / D, d = i % D;
    float mx = -FLT_MAX;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, mg.m[w][r]);
    float sum = 0.0f, acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float wt = exp2_ftz((mg.m[w][r] - mx) * qscale);
      sum += mg.l[w][r] * wt;
      acc += mg.o[w][r][d] * wt;
    }
    const int64_t row = row0 + r;
    if (part_acc == nullptr) {
      a.out[row * D + d] = __float2bfloat16(acc * v_scale / sum);
    } else {  // an empty split leaves M = -FLT_MAX, sum 0, acc 0: no weight in the merge
      const int64_t p = int64_t(z) * rows_total + row;
      if (d == 0) {
        part_ml[2 * p] = mx * qscale;
        part_ml[2 * p + 1] = sum;
      }
      part_acc[p * D + d] = acc * v_scale;
    }
  }
}

template <int D, bool kHeadMajor>
void launch(const PagedAttentionArgs& a, const AttentionSplit& split, float* part_ml,
            float* part_acc, cudaStream_t stream) {
  constexpr int kSmem = smem_bytes<D>();
  allow_dynamic_smem<decode_mma_kernel<D, kHeadMajor>>(kSmem);
  const dim3 grid(static_cast<unsigned>(a.num_seqs), static_cast<unsigned>(a.num_kv_heads),
                  static_cast<unsigned>(split.num_splits));
  launch_pdl("attention decode_mma_kernel", decode_mma_kernel<D, kHeadMajor>, grid, kThreads,
             kSmem, stream, a, a.num_q_heads / a.num_kv_heads, split, part_ml, part_acc);
  KS_CUDA_CHECK_LAUNCH("attention decode_mma_kernel");
}

}  // namespace

bool use_decode_mma(const PagedAttentionArgs& a) {
  return a.kv.fp8 && use_decode_kernel(a) && (a.head_dim == 64 || a.head_dim == 128) &&
         a.num_q_heads / a.num_kv_heads <= 16;
}

void decode_mma_attention(const PagedAttentionArgs& a, const AttentionSplit& split,
                          float* part_ml, float* part_acc, cudaStream_t stream) {
  if (a.head_dim == 64) {
    return a.kv_head_major ? launch<64, true>(a, split, part_ml, part_acc, stream)
                           : launch<64, false>(a, split, part_ml, part_acc, stream);
  }
  a.kv_head_major ? launch<128, true>(a, split, part_ml, part_acc, stream)
                  : launch<128, false>(a, split, part_ml, part_acc, stream);
}

}  // namespace kestrel::kernels::detail
