// The split path for plain rows (greedy, or temperature alone): one read of the logits,
// spread over many blocks per row, so that one row (batch 1) uses the whole GPU and many
// rows (batch 256) read their logits once instead of twice.
//
//  1. chunk_stats_kernel, grid (rows, chunk groups), one warp per chunk of kPlainChunk ids:
//     greedy rows store the chunk's argmax (largest value, lowest id); the others store the
//     chunk's max m_c and its mass relative to that max, the sum of 2^((x - m_c) log2(e) / T).
//  2. pick_kernel, one block per row: the row max M from the chunk maxima; greedy rows are
//     done. The others rescale each chunk's mass by exp((m_c - M) / T), find by a block scan
//     the chunk holding u * total (u = uniform01(seed, position, 0)), and one warp walks
//     that chunk with the exact weights of the CPU sampler (sample_weight) from the chunk's
//     prefix mass.
//
// Vocab-parallel form (tensor parallelism, PlainShard): each rank runs step 1 on its own
// shard of the vocabulary, whose chunks are the unsharded row's chunks (a shard starts on a
// chunk boundary), the ranks gather the statistics, and step 2 runs on every rank over all of
// them; only the rank holding the chosen chunk walks it. Every rank sees the same statistics
// in the same order, so the token is the unsharded path's, bit for bit.
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

// The unsharded row as a shard of one rank.
PlainShard whole_row(const SampleArgs& a) {
  return PlainShard{0, plain_chunks(a.vocab), a.vocab, a.vocab};
}

__device__ __forceinline__ const float* row_logits(const SampleArgs& a, const PlainShard& s,
                                                   int row, const RowParams& p) {
  return p.processed_row >= 0 ? a.processed + static_cast<int64_t>(p.processed_row) * a.vocab
                              : a.logits + static_cast<int64_t>(row) * s.stride;
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

// stats[row * s.chunks + c]: chunk c of this rank's shard (ids from s.rank * s.chunks *
// kPlainChunk; the argmax ids are the row's, not the shard's).
__global__ void __launch_bounds__(kStatsWarps * 32)
    chunk_stats_kernel(SampleArgs args, PlainShard s, PlainChunkStat* stats) {
  const int row = blockIdx.x;
  const RowParams p = args.rows[row];
  if (!is_plain(p)) return;
  const int chunk = blockIdx.y * kStatsWarps + threadIdx.x / 32;
  if (chunk >= s.chunks) return;
  const int lane = threadIdx.x % 32;
  const float* x = row_logits(args, s, row, p);
  const int first = chunk * kPlainChunk + lane;
  // NaN pads the last chunk: it never wins the argmax, fmaxf skips it, its weight is NaN.
  float v[kLaneItems];
#pragma unroll
  for (int i = 0; i < kLaneItems; ++i) {
    const int j = first + 32 * i;
    v[i] = j < s.valid ? __ldg(x + j) : __int_as_float(0x7fffffff);
  }
  PlainChunkStat& out = stats[static_cast<size_t>(row) * s.chunks + chunk];
  if (p.temperature == 0.0f) {
    const int id_base = s.rank * s.chunks * kPlainChunk;
    ArgMax best{kNegInf, INT_MAX};
#pragma unroll
    for (int i = 0; i < kLaneItems; ++i) best.take(v[i], id_base + first + 32 * i);
    best = warp_argmax(best);
    if (lane == 0) {
      out.max = best.value;
      out.arg = best.id;
    }
    return;
  }
  float m = kNegInf;
#pragma unroll
  for (int i = 0; i < kLaneItems; ++i) m = fmaxf(m, v[i]);
  m = warp_max(m);
  // Float weights relative to the chunk max, summed in float over a lane's 8 and in double
  // across the warp: errors of a few ulp, random in sign. Only the draw's chunk comes from
  // them (the walk uses the exact weights), so they are 2^((x - m) log2(e) / T) on the
  // special-function unit: the exact quotient and expf made the kernel bound by the FP32 pipe
  // (73 us at 256 rows on the H200 against 47 us for greedy rows), and double exp by FP64
  // (174 us).
  float lane_mass = 0.0f;
  if (m > kNegInf) {
    const float scale = 1.44269504088896341f / p.temperature;
#pragma unroll
    for (int i = 0; i < kLaneItems; ++i) {
      const float w = exp2f((v[i] - m) * scale);
      if (w > 0.0f) lane_mass += w;  // skips NaN (padding, NaN logits, +inf maxima)
    }
  }
  double mass = lane_mass;
  mass = warp_sum(mass);
  if (lane == 0) {
    out.max = m;
    out.mass = mass;
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
__device__ __forceinline__ double chunk_mass(const PlainChunkStat& c, float row_max,
                                             double inv_t) {
  const double m = c.mass;
  if (!(m > 0.0)) return 0.0;
  const double scaled = m * exp((static_cast<double>(c.max) - static_cast<double>(row_max)) * inv_t);
  return scaled > 0.0 ? scaled : 0.0;
}

// stats: [rows, n] every rank's chunks in rank order (n = world x s.chunks; unsharded, the
// row's chunks). owner_tokens null: the token goes to results and feedback. Otherwise
// owner_tokens[row] gets the token on the rank holding its chunk and 0 on the others, and
// results the row's status (plain_shard_finish writes the summed token).
__global__ void __launch_bounds__(kPickThreads)
    pick_kernel(SampleArgs args, PlainShard s, const PlainChunkStat* stats, int n,
                float* owner_tokens) {
  __shared__ PickShared sh;
  const int row = blockIdx.x;
  const RowParams p = args.rows[row];
  if (!is_plain(p)) return;
  const int per = (n + kPickThreads - 1) / kPickThreads;
  const int begin = min(static_cast<int>(threadIdx.x) * per, n), end = min(begin + per, n);
  const PlainChunkStat* st = stats + static_cast<size_t>(row) * n;
  const int shard_ids = s.chunks * kPlainChunk;
  RowResult res;
  bool mine = true;  // this rank holds the token's chunk
  if (p.temperature == 0.0f) {
    ArgMax best{kNegInf, INT_MAX};
    for (int c = begin; c < end; ++c) best.take(st[c].max, st[c].arg);
    best = pick_block_argmax(best, sh);
    res.token = best.id == INT_MAX ? 0 : best.id;
    mine = res.token / shard_ids == s.rank;
  } else {
    float m = kNegInf;
    for (int c = begin; c < end; ++c) m = fmaxf(m, st[c].max);
    const float row_max = pick_block_max(m, sh);
    if (!(row_max > kNegInf)) {
      res.status = kRowNoFiniteLogit;
    } else {
      const double inv_t = 1.0 / static_cast<double>(p.temperature);
      double held = 0.0;
      for (int c = begin; c < end; ++c) held += chunk_mass(st[c], row_max, inv_t);
      double total;
      double run = pick_exclusive_scan(held, &total, sh);
      const float u = uniform01(p.seed, static_cast<uint64_t>(p.position), 0);
      const double target = static_cast<double>(u) * total;
      if (threadIdx.x == 0) {
        sh.found_chunk = -1;
        sh.last_chunk = -1;
      }
      __syncthreads();
      for (int c = begin; c < end; ++c) {
        const double mass = chunk_mass(st[c], row_max, inv_t);
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
      mine = chunk / s.chunks == s.rank;
      if (threadIdx.x < 32 && mine) {
        const int lane = threadIdx.x;
        const float* x = row_logits(args, s, row, p);
        const int local = (chunk - s.rank * s.chunks) * kPlainChunk;  // in this rank's shard
        const int first = s.rank * shard_ids + local;                // in the row
        float v[kLaneItems];
#pragma unroll
        for (int i = 0; i < kLaneItems; ++i) {
          const int j = local + 32 * i + lane;
          v[i] = j < s.valid ? x[j] : __int_as_float(0x7fffffff);
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
    if (owner_tokens != nullptr) {
      owner_tokens[row] = mine && res.status == kRowOk ? static_cast<float>(res.token) : 0.0f;
      res.token = 0;  // plain_shard_finish writes the sum over ranks
    } else if (args.feedback != nullptr) {
      args.feedback[row] = res.token;
    }
    out.token = res.token;
    out.status = res.status;
    out.logprob = 0.0f;
    out.rank = 0;
    out.num_top = 0;
  }
}

// The tokens summed over ranks (exact in float: ids below 2^24) into results and feedback.
__global__ void shard_finish_kernel(SampleArgs args, const float* tokens) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= args.num_rows) return;
  const int token = static_cast<int>(tokens[row]);
  args.results[row].token = token;
  if (args.feedback != nullptr) args.feedback[row] = token;
}

void launch_stats(const SampleArgs& args, const PlainShard& s, PlainChunkStat* stats,
                  cudaStream_t stream) {
  const int groups = (s.chunks + kStatsWarps - 1) / kStatsWarps;
  KS_ASSERT(groups <= 65535, "sampler: {} chunks are too many", s.chunks);
  chunk_stats_kernel<<<dim3(args.num_rows, groups), kStatsWarps * 32, 0, stream>>>(args, s, stats);
  KS_CUDA_CHECK_LAUNCH("chunk_stats_kernel");
}

void launch_pick(const SampleArgs& args, const PlainShard& s, const PlainChunkStat* stats,
                 int chunks, float* owner_tokens, cudaStream_t stream) {
  pick_kernel<<<args.num_rows, kPickThreads, 0, stream>>>(args, s, stats, chunks, owner_tokens);
  KS_CUDA_CHECK_LAUNCH("pick_kernel");
}

// What every shard entry point needs: plain rows only, none processed, ids that float holds.
void check_shard(const SampleArgs& a, const PlainShard& s, int world) {
  KS_CHECK(world >= 1 && s.rank >= 0 && s.rank < world, "vocab-parallel sampler: rank {} of {}",
           s.rank, world);
  KS_CHECK(s.chunks > 0 && s.valid > 0 && s.valid <= s.chunks * kPlainChunk && s.stride >= s.valid,
           "vocab-parallel sampler: shard of {} chunks, {} ids, row stride {}", s.chunks, s.valid,
           s.stride);
  KS_CHECK(int64_t{world} * s.chunks * kPlainChunk <= (int64_t{1} << 24),
           "vocab-parallel sampler: {} ids do not fit a float", int64_t{world} * s.chunks * kPlainChunk);
  KS_CHECK(a.num_processed == 0 && a.num_plain == a.num_rows,
           "vocab-parallel sampler: every row must be plain and unprocessed ({} of {} plain, {} "
           "processed)", a.num_plain, a.num_rows, a.num_processed);
}

}  // namespace

size_t plain_scratch_bytes(int num_rows, int vocab) {
  return static_cast<size_t>(num_rows) * plain_chunks(vocab) * sizeof(PlainChunkStat);
}

void launch_plain(const SampleArgs& args, cudaStream_t stream) {
  KS_ASSERT(args.plain_scratch != nullptr, "sampler: the plain rows need their scratch");
  const PlainShard whole = whole_row(args);
  auto* stats = static_cast<PlainChunkStat*>(args.plain_scratch);
  launch_stats(args, whole, stats, stream);
  launch_pick(args, whole, stats, whole.chunks, nullptr, stream);
}

void plain_shard_stats(const SampleArgs& args, const PlainShard& shard, int world,
                       PlainChunkStat* stats, cudaStream_t stream) {
  check_shard(args, shard, world);
  if (args.num_rows > 0) launch_stats(args, shard, stats, stream);
}

void plain_shard_pick(const SampleArgs& args, const PlainShard& shard, int world,
                      const PlainChunkStat* all_stats, float* owner_tokens, cudaStream_t stream) {
  check_shard(args, shard, world);
  KS_CHECK(owner_tokens != nullptr, "vocab-parallel sampler: no owner_tokens");
  if (args.num_rows > 0) launch_pick(args, shard, all_stats, world * shard.chunks, owner_tokens, stream);
}

void plain_shard_finish(const SampleArgs& args, const float* tokens, cudaStream_t stream) {
  if (args.num_rows == 0) return;
  constexpr int kThreads = 256;
  shard_finish_kernel<<<(args.num_rows + kThreads - 1) / kThreads, kThreads, 0, stream>>>(args, tokens);
  KS_CUDA_CHECK_LAUNCH("shard_finish_kernel");
}

}  // namespace kestrel::sampling_kernels
