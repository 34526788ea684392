// The split path for plain rows (greedy, or temperature alone): one read of the logits,
// spread over many blocks per row, so that one row (batch 1) uses the whole GPU and many
// rows (batch 256) read their logits once instead of twice.
//
//  1. chunk_stats_kernel, grid (rows, chunk groups), one warp per chunk of kPlainChunk ids:
//     greedy rows store the chunk's argmax (largest value, lowest id); the others store the
//     chunk's max m_c and its mass relative to that max, the sum of expf((x - m_c) / T).
//  2. pick_kernel, one block per row: the row max M from the chunk maxima; greedy rows are
//     done. The others rescale each chunk's mass by exp((m_c - M) / T), find by a block scan
//     the chunk holding u * total (u = uniform01(seed, position, 0)), and one warp walks
//     that chunk with the exact weights of the CPU sampler (sample_weight) from the chunk's
//     prefix mass.
//
// The chunk masses are not the CPU's sums of its weights: each weight differs by a few ulp
// of rounding, random in sign, so the prefix error grows like the square root of the ids
// before the draw. A token can differ from the CPU's only when the CPU's running sum lies
// that close to the draw target (docs/gpu_sampling.md).
#include <climits>
#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/sampling/sampling_device.cuh"
#include "backend/cuda/sampling/sampling_plain.h"
#include "core/error.h"
#include "core/philox.h"

namespace kestrel::sampling_kernels {
namespace {

constexpr int kLaneItems = kPlainChunk / 32;
constexpr int kStatsWarps = 4;  // chunks per block of the statistics kernel
constexpr int kPickThreads = 256;
constexpr int kPickWarps = kPickThreads / 32;

// Per-(row, chunk) statistics, each array [rows * chunks].
struct ChunkStats {
  double* mass;  // sum of expf((x - max) / T) over the chunk; unused for greedy rows
  float* max;    // the chunk's max (greedy: the value of its argmax)
  int* arg;      // greedy: the chunk's argmax id (INT_MAX when every value is NaN)
  int chunks;
};

ChunkStats stats_layout(void* scratch, int num_rows, int vocab) {
  const int chunks = plain_chunks(vocab);
  const size_t n = static_cast<size_t>(num_rows) * chunks;
  auto* bytes = static_cast<unsigned char*>(scratch);
  ChunkStats s;
  s.mass = reinterpret_cast<double*>(bytes);
  s.max = reinterpret_cast<float*>(bytes + n * sizeof(double));
  s.arg = reinterpret_cast<int*>(bytes + n * (sizeof(double) + sizeof(float)));
  s.chunks = chunks;
  return s;
}

__device__ __forceinline__ const float* row_logits(const SampleArgs& a, int row,
                                                   const RowParams& p) {
  return p.processed_row >= 0 ? a.processed + static_cast<int64_t>(p.processed_row) * a.vocab
                              : a.logits + static_cast<int64_t>(row) * a.vocab;
}

__device__ __forceinline__ ArgMax warp_argmax(ArgMax a) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(kFullMask, a.value, o);
    const int i = __shfl_xor_sync(kFullMask, a.id, o);
    a.take(v, i);
  }
  return a;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

__global__ void __launch_bounds__(kStatsWarps * 32)
    chunk_stats_kernel(SampleArgs args, ChunkStats st) {
  const int row = blockIdx.x;
  const RowParams p = args.rows[row];
  if (!is_plain(p)) return;
  const int chunk = blockIdx.y * kStatsWarps + threadIdx.x / 32;
  if (chunk >= st.chunks) return;
  const int lane = threadIdx.x % 32;
  const float* x = row_logits(args, row, p);
  const int first = chunk * kPlainChunk + lane;
  // NaN pads the last chunk: it never wins the argmax, fmaxf skips it, its weight is NaN.
  float v[kLaneItems];
#pragma unroll
  for (int i = 0; i < kLaneItems; ++i) {
    const int j = first + 32 * i;
    v[i] = j < args.vocab ? __ldg(x + j) : __int_as_float(0x7fffffff);
  }
  const size_t slot = static_cast<size_t>(row) * st.chunks + chunk;
  if (p.temperature == 0.0f) {
    ArgMax best{kNegInf, INT_MAX};
#pragma unroll
    for (int i = 0; i < kLaneItems; ++i) best.take(v[i], first + 32 * i);
    best = warp_argmax(best);
    if (lane == 0) {
      st.max[slot] = best.value;
      st.arg[slot] = best.id;
    }
    return;
  }
  float m = kNegInf;
#pragma unroll
  for (int i = 0; i < kLaneItems; ++i) m = fmaxf(m, v[i]);
  m = warp_max(m);
  // Float weights relative to the chunk max, summed in float over a lane's 8 and in double
  // across the warp: errors of a few ulp, random in sign (double exp made the kernel FP64
  // bound: 174 us against 74 us at 256 rows on the H200).
  float lane_mass = 0.0f;
  if (m > kNegInf) {
#pragma unroll
    for (int i = 0; i < kLaneItems; ++i) {
      const float w = expf(__fdiv_rn(__fsub_rn(v[i], m), p.temperature));
      if (w > 0.0f) lane_mass += w;  // skips NaN (padding, NaN logits, +inf maxima)
    }
  }
  double mass = lane_mass;
  mass = warp_sum(mass);
  if (lane == 0) {
    st.max[slot] = m;
    st.mass[slot] = mass;
  }
}

// Block-wide helpers of the pick kernel (kPickThreads threads); each ends with a barrier
// so calls may follow one another.
struct PickShared {
  double d[kPickWarps + 1];
  float f[kPickWarps];
  int i[kPickWarps];
  int found_chunk;
  int last_chunk;
  double found_prefix;
};

__device__ float pick_block_max(float v, PickShared& sh) {
  v = warp_max(v);
  if (threadIdx.x % 32 == 0) sh.f[threadIdx.x / 32] = v;
  __syncthreads();
  float m = sh.f[0];
  for (int w = 1; w < kPickWarps; ++w) m = fmaxf(m, sh.f[w]);
  __syncthreads();
  return m;
}

__device__ ArgMax pick_block_argmax(ArgMax a, PickShared& sh) {
  a = warp_argmax(a);
  if (threadIdx.x % 32 == 0) {
    sh.f[threadIdx.x / 32] = a.value;
    sh.i[threadIdx.x / 32] = a.id;
  }
  __syncthreads();
  ArgMax r{sh.f[0], sh.i[0]};
  for (int w = 1; w < kPickWarps; ++w) r.take(sh.f[w], sh.i[w]);
  __syncthreads();
  return r;
}

// Exclusive prefix sum in thread order; *total gets the sum over the block.
__device__ double pick_exclusive_scan(double v, double* total, PickShared& sh) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const double inc = warp_inclusive_scan(v);
  if (lane == 31) sh.d[warp] = inc;
  __syncthreads();
  if (threadIdx.x == 0) {
    double run = 0.0;
    for (int w = 0; w < kPickWarps; ++w) {
      const double s = sh.d[w];
      sh.d[w] = run;
      run += s;
    }
    sh.d[kPickWarps] = run;
  }
  __syncthreads();
  const double out = sh.d[warp] + inc - v;
  *total = sh.d[kPickWarps];
  __syncthreads();
  return out;
}

// A chunk's mass relative to the row max M.
__device__ __forceinline__ double chunk_mass(const ChunkStats& st, size_t slot, float row_max,
                                             double inv_t) {
  const double m = st.mass[slot];
  if (!(m > 0.0)) return 0.0;
  const double scaled =
      m * exp((static_cast<double>(st.max[slot]) - static_cast<double>(row_max)) * inv_t);
  return scaled > 0.0 ? scaled : 0.0;
}

__global__ void __launch_bounds__(kPickThreads) pick_kernel(SampleArgs args, ChunkStats st) {
  __shared__ PickShared sh;
  const int row = blockIdx.x;
  const RowParams p = args.rows[row];
  if (!is_plain(p)) return;
  const int n = st.chunks;
  const int per = (n + kPickThreads - 1) / kPickThreads;
  const int begin = min(static_cast<int>(threadIdx.x) * per, n), end = min(begin + per, n);
  const size_t base = static_cast<size_t>(row) * n;
  RowResult res;
  if (p.temperature == 0.0f) {
    ArgMax best{kNegInf, INT_MAX};
    for (int c = begin; c < end; ++c) best.take(st.max[base + c], st.arg[base + c]);
    best = pick_block_argmax(best, sh);
    res.token = best.id == INT_MAX ? 0 : best.id;
  } else {
    float m = kNegInf;
    for (int c = begin; c < end; ++c) m = fmaxf(m, st.max[base + c]);
    const float row_max = pick_block_max(m, sh);
    if (!(row_max > kNegInf)) {
      res.status = kRowNoFiniteLogit;
    } else {
      const double inv_t = 1.0 / static_cast<double>(p.temperature);
      double mine = 0.0;
      for (int c = begin; c < end; ++c) mine += chunk_mass(st, base + c, row_max, inv_t);
      double total;
      double run = pick_exclusive_scan(mine, &total, sh);
      const float u = uniform01(p.seed, static_cast<uint64_t>(p.position), 0);
      const double target = static_cast<double>(u) * total;
      if (threadIdx.x == 0) {
        sh.found_chunk = -1;
        sh.last_chunk = -1;
      }
      __syncthreads();
      for (int c = begin; c < end; ++c) {
        const double mass = chunk_mass(st, base + c, row_max, inv_t);
        const double next = run + mass;
        if (mass > 0.0) {
          if (run <= target && next > target) {
            sh.found_chunk = c;
            sh.found_prefix = run;
          }
          atomicMax(&sh.last_chunk, c);
        }
        run = next;
      }
      __syncthreads();
      // When rounding never crosses the target, the last kept id of the last chunk with mass
      // (as the one-block draw does): an infinite target is never reached.
      const bool found = sh.found_chunk >= 0;
      const int chunk = found ? sh.found_chunk : max(sh.last_chunk, 0);
      const double prefix = found ? sh.found_prefix : 0.0;
      const double goal = found ? target : static_cast<double>(INFINITY);
      if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        const float* x = row_logits(args, row, p);
        const int first = chunk * kPlainChunk;
        float v[kLaneItems];
#pragma unroll
        for (int i = 0; i < kLaneItems; ++i) {
          const int j = first + 32 * i + lane;
          v[i] = j < args.vocab ? x[j] : __int_as_float(0x7fffffff);
        }
        double acc = prefix;
        int token = -1, last = -1;
#pragma unroll
        for (int i = 0; i < kLaneItems; ++i) {
          const float w = sample_weight(v[i], row_max, p.temperature);
          const bool kept = w > 0.0f;
          const double inc = warp_inclusive_scan(kept ? static_cast<double>(w) : 0.0);
          const uint32_t hit = __ballot_sync(kFullMask, kept && acc + inc > goal);
          const uint32_t kb = __ballot_sync(kFullMask, kept);
          if (hit != 0) {
            token = first + 32 * i + __ffs(hit) - 1;
            break;
          }
          if (kb != 0) last = first + 32 * i + 31 - __clz(kb);
          acc += __shfl_sync(kFullMask, inc, 31);
        }
        res.token = token >= 0 ? token : last;
      }
    }
  }
  if (threadIdx.x == 0) {
    RowResult& out = args.results[row];
    out.token = res.token;
    if (args.feedback != nullptr) args.feedback[row] = res.token;
    out.status = res.status;
    out.logprob = 0.0f;
    out.rank = 0;
    out.num_top = 0;
  }
}

}  // namespace

size_t plain_scratch_bytes(int num_rows, int vocab) {
  const size_t n = static_cast<size_t>(num_rows) * plain_chunks(vocab);
  return n * (sizeof(double) + sizeof(float) + sizeof(int));
}

void launch_plain(const SampleArgs& args, cudaStream_t stream) {
  KS_ASSERT(args.plain_scratch != nullptr, "sampler: the plain rows need their scratch");
  const ChunkStats st = stats_layout(args.plain_scratch, args.num_rows, args.vocab);
  const int groups = (st.chunks + kStatsWarps - 1) / kStatsWarps;
  KS_ASSERT(groups <= 65535, "sampler: vocab {} has too many chunks", args.vocab);
  chunk_stats_kernel<<<dim3(args.num_rows, groups), kStatsWarps * 32, 0, stream>>>(args, st);
  KS_CUDA_CHECK_LAUNCH("chunk_stats_kernel");
  pick_kernel<<<args.num_rows, kPickThreads, 0, stream>>>(args, st);
  KS_CUDA_CHECK_LAUNCH("pick_kernel");
}

}  // namespace kestrel::sampling_kernels
