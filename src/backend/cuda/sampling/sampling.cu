// The device sampler: one thread block of 512 threads per row, same semantics as the CPU
// sampler (docs/sampling.md); the design and its costs are in docs/gpu_sampling.md. Plain
// rows (greedy or temperature alone, no logprobs) take the split path of sampling_plain.cu
// instead; this kernel then skips them. top_k rows (takes_topk_split) in batches that launch
// sampling_topk.cu have pass 1 and the compaction made there, over many blocks; this kernel
// starts from their candidates (gather_topk_candidates).
//
// Per row (x = the processed logits, raw = the model's; every "pass" reads the row once):
//  1. pass 1: greedy rows take the argmax (ties to the lowest id) and are done; other rows
//     take the max M and, with top_k, a 2048-bin histogram of the logits' top key bits.
//  2. candidates: with top_k, the logits in the histogram bins at or above the k-th largest;
//     with top_p / min_p alone, a second pass histograms a = (x - M) / T and bounds from it
//     the bins that can hold the nucleus and the tokens min_p keeps. When the candidates fit
//     in shared memory (8192), one pass compacts them there in id order and every later
//     step runs on that list; otherwise the later steps make passes over the row.
//  3. top_k threshold (radix select), weights exp((x - M) / T), top_p cut (radix select
//     on weight bits with fixed-point mass histograms), min_p, and the draw
//     u = uniform01(seed, position, 0) by a two-level prefix sum in id order.
//  4. logprobs from the raw row: one pass for log-sum-exp, rank and a histogram of the raw
//     keys, then the top N by the same select-and-compact scheme.
// Penalised or masked rows (min_tokens, or a structured-output mask of allowed tokens) are
// first copied into a scratch buffer and edited there (sampling_penalties.cu), so the
// sampling kernel always reads one processed row.
//
// Launch: grid = rows, 512 threads, sizeof(Smem) (~88 KiB) of dynamic shared memory, two
// blocks per SM. Tests: tests/backend_cuda/sampling_test.cc against the CPU sampler, and
// sampling_timing_test.cc against the logits' byte floor (scripts/gpu_check.sh runs both).
#include <climits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/sampling/sampling_plain.h"
#include "backend/cuda/sampling/sampling_nucleus.cuh"
#include "backend/cuda/sampling/sampling_nucleus.h"
#include "backend/cuda/sampling/sampling_select.cuh"
#include "backend/cuda/sampling/sampling_topk.h"
#include "core/philox.h"

namespace kestrel::sampling_kernels {
namespace {

// Filters (top_p, min_p) and the draw over a weight source.
template <typename Src>
__device__ int filter_and_draw(const Src& src, const RowParams& p, double total_all, Smem& s) {
  Keep keep;
  keep.min_p = p.min_p;
  if (p.top_p < 1.0f) keep.cut = top_p_cut(src, p.top_p, total_all, s);
  const float u = uniform01(p.seed, static_cast<uint64_t>(p.position), 0);
  return draw(src, keep, u, s);
}

// The rest of sample_random once the candidates are in the shared list: logits (top_k then
// applies) or, with list_weights, weights already.
__device__ int sample_list(const RowParams& p, float max, int list_n, bool list_weights,
                           double total_all, Smem& s) {
  float kth = kNegInf;
  if (p.top_k > 0) kth = key_float(count_select(ListValues{s.list_ids, s.list_vals, list_n},
                                                static_cast<uint32_t>(p.top_k), s).key);
  if (!list_weights) {
    for (int j = threadIdx.x; j < list_n; j += kThreads) {
      const float v = s.list_vals[j];
      s.list_vals[j] = v >= kth ? sample_weight(v, max, p.temperature) : 0.0f;
    }
    __syncthreads();
  }
  return filter_and_draw(ListWeights{s.list_ids, s.list_vals, list_n}, p, total_all, s);
}

// Copies the segments' lists, in segment order, into the shared list [0, n): segment g's
// s.work.segments.first[g] (its place in the shared list, ascending in g) and source[g] (its
// first element in ids / values) are set; its count is the next one's first minus its own.
__device__ void copy_segment_lists(const int32_t* ids, const float* values, int segs, int n, Smem& s) {
  __syncthreads();
  for (int j = threadIdx.x; j < n; j += kThreads) {
    // The last segment starting at or before j holds it (empty ones share the next one's start).
    int lo = 0, hi = segs;
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (s.work.segments.first[mid] <= static_cast<uint32_t>(j)) lo = mid; else hi = mid;
    }
    const size_t from = s.work.segments.source[lo] + (j - s.work.segments.first[lo]);
    s.list_ids[j] = ids[from];
    s.list_vals[j] = values[from];
  }
  __syncthreads();
}

constexpr int kSegmentsPerThread = kTopKMaxSegments / kThreads;

// The union of a row's segment lists, in segment order, copied into the shared list. This
// thread holds segments [threadIdx.x * kSegmentsPerThread, +kSegmentsPerThread): counts[i]
// (0 past the row's segments or for a segment that overflowed) and sources[i] (its list's
// first element in ids / values); `over` counts its overflowed segments. Returns the list's
// size, or -1 when a segment overflowed or the union is over kListCap (the one-block passes
// then run). Every thread calls it.
__device__ int copy_row_segments(const uint32_t (&counts)[kSegmentsPerThread],
                                 const uint32_t (&sources)[kSegmentsPerThread], uint32_t over,
                                 int segs, const int32_t* ids, const float* values, Smem& s) {
  uint32_t held = 0;
#pragma unroll
  for (int i = 0; i < kSegmentsPerThread; ++i) held += counts[i];
  over = block_sum(over, s);
  uint32_t total;
  uint32_t at = block_exclusive_scan(held, &total, s);
  if (over != 0 || total > static_cast<uint32_t>(kListCap)) return -1;
  const int first = threadIdx.x * kSegmentsPerThread;
#pragma unroll
  for (int i = 0; i < kSegmentsPerThread; ++i) {
    if (first + i < segs) {
      s.work.segments.first[first + i] = at;
      s.work.segments.source[first + i] = sources[i];
      at += counts[i];
    }
  }
  const int n = static_cast<int>(total);
  copy_segment_lists(ids, values, segs, n, s);
  return n;
}

// A top_k row's candidate list from its segments' lists (sampling_topk.h): the row max, the
// union of the lists in id order, then only the ids whose key bin is at or above the bin of
// the k-th largest key: the list compact_row makes in sample_random. Returns its size, or -1
// when a segment kept too many or the union does not fit (the one-block passes then run).
__device__ int gather_topk_candidates(const TopKScratch& sc, int row, uint32_t k, float* row_max,
                                      Smem& s) {
  const int segs = sc.num_segments;
  const TopKSegment* rec = sc.segments + static_cast<size_t>(row) * segs;
  const int first = threadIdx.x * kSegmentsPerThread;
  float m = kNegInf;
  uint32_t counts[kSegmentsPerThread], sources[kSegmentsPerThread], over = 0;
#pragma unroll
  for (int i = 0; i < kSegmentsPerThread; ++i) {
    const TopKSegment r = first + i < segs ? rec[first + i] : TopKSegment{kNegInf, 0};
    m = fmaxf(m, r.max);
    over += r.count < 0 ? 1u : 0u;
    counts[i] = r.count < 0 ? 0u : static_cast<uint32_t>(r.count);
    sources[i] = static_cast<uint32_t>((static_cast<size_t>(row) * segs + first + i) * kTopKSegmentCap);
  }
  *row_max = block_max(m, s);
  const int n = copy_row_segments(counts, sources, over, segs, sc.ids, sc.values, s);
  if (n < 0) return -1;
  for (int b = threadIdx.x; b < kBins; b += kThreads) s.work.hist.count[b] = 0;
  __syncthreads();
  for (int j = threadIdx.x; j < n; j += kThreads) {
    atomicAdd(&s.work.hist.count[float_key(s.list_vals[j]) >> 21], 1u);
  }
  __syncthreads();
  int bin;
  uint32_t above;
  if (!find_crossing<uint32_t>(
          kBins, [&](int d) { return s.work.hist.count[d]; }, [&](uint32_t c) { return c >= k; },
          &bin, &above, s)) {
    bin = 0;  // unreachable: the union holds the row's k largest
  }
  const uint32_t b = static_cast<uint32_t>(bin);
  return compact_list(n, [&](float v) { return (float_key(v) >> 21) >= b; }, s);
}

// A top_p / min_p row's candidate list (weights) from its segments' (sampling_nucleus.h),
// with the row max and its mass as the one-block path's compaction sums it. Returns the list's
// size, or -1 when a segment overflowed or the row has too many candidates.
__device__ int gather_nucleus_candidates(const NucleusScratch& sc, int row, float* row_max,
                                         double* row_mass, Smem& s) {
  const int segs = sc.num_segments;
  const size_t at_row = static_cast<size_t>(row) * segs;
  const int first = threadIdx.x * kSegmentsPerThread;
  float m = kNegInf;
  double mass = 0.0;
  uint32_t counts[kSegmentsPerThread], sources[kSegmentsPerThread], over = 0;
#pragma unroll
  for (int i = 0; i < kSegmentsPerThread; ++i) {
    counts[i] = sources[i] = 0;
    if (first + i >= segs) continue;
    const NucleusSegment r = sc.segments[at_row + first + i];
    m = fmaxf(m, sc.seg_max[at_row + first + i]);
    mass += r.mass;
    over += r.count < 0 ? 1u : 0u;
    counts[i] = r.count < 0 ? 0u : static_cast<uint32_t>(r.count);
    sources[i] = static_cast<uint32_t>(static_cast<size_t>(row) * kNucleusListCap + r.first);
  }
  *row_max = block_max(m, s);
  *row_mass = block_sum(mass, s);
  return copy_row_segments(counts, sources, over, segs, sc.ids, sc.weights, s);
}

__device__ int sample_random(const float* x, int vocab, const RowParams& p, float row_max, Smem& s) {
  const float max = row_max;
  const float t = p.temperature;
  const bool top_k = p.top_k > 0, top_p = p.top_p < 1.0f, min_p = p.min_p > 0.0f;
  int list_n = -1;
  double total_all = -1.0;
  bool list_weights = false;  // the list holds weights already (no top_k to apply)
  if (top_k) {
    int bin;
    uint32_t above;
    const uint32_t k = static_cast<uint32_t>(p.top_k);
    find_crossing<uint32_t>(
        kBins, [&](int d) { return s.work.hist.count[d]; }, [&](uint32_t c) { return c >= k; },
        &bin, &above, s);
    const int candidates = static_cast<int>(above + s.work.hist.count[bin]);
    __syncthreads();  // count_select may clear the histogram next
    if (candidates <= kListCap) {
      const uint32_t b = static_cast<uint32_t>(bin);
      list_n = compact_row(x, vocab, [&](float v, float*) { return (float_key(v) >> 21) >= b; }, s);
    }
  } else if (top_p || min_p) {
    const int floor_bin = min_p ? min_p_bin(p.min_p) : 0;
    int lowest = floor_bin, candidates = 0;
    if (top_p) {
      for (int b = threadIdx.x; b < kABins; b += kThreads) s.work.hist.count[b] = 0;
      __syncthreads();
      for_each(RowValues{x, vocab}, [&](int, float v) {
        atomicAdd(&s.work.hist.count[a_bin(v, max, t)], 1u);
      });
      __syncthreads();
      lowest = top_p_bin(p.top_p, floor_bin, &candidates, s.work.hist.count, s);
    }
    if (candidates <= kListCap) {
      // The list holds weights; the tokens left out add their (fast) weights to the total
      // that top_p needs: they hold at most ~(1 - top_p) of the mass.
      double mass = 0.0;
      list_n = compact_row(x, vocab, [&](float v, float* stored) {
        if (a_bin(v, max, t) >= lowest) {
          *stored = sample_weight(v, max, t);
          mass += *stored;
          return true;
        }
        mass += expf(__fdiv_rn(__fsub_rn(v, max), t));
        return false;
      }, s);
      if (list_n >= 0) {
        list_weights = true;
        if (top_p) total_all = block_sum(mass, s);
      }
    }
  }

  if (list_n >= 0) return sample_list(p, max, list_n, list_weights, total_all, s);
  float kth = kNegInf;
  if (top_k) kth = key_float(count_select(RowValues{x, vocab}, static_cast<uint32_t>(p.top_k), s).key);
  return filter_and_draw(RowWeights{x, vocab, max, t, kth}, p, -1.0, s);
}

// Sorts s.work.top[0, n) by (value desc, id asc) and writes it with logprobs value - lse.
__device__ void write_top(int n, double lse, TopLogprob* out, Smem& s) {
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float v = s.work.top.vals[i];
    const int id = s.work.top.ids[i];
    int rank = 0;
    for (int j = 0; j < n; ++j) {
      const float o = s.work.top.vals[j];
      rank += (o > v || (o == v && s.work.top.ids[j] < id)) ? 1 : 0;
    }
    out[rank] = TopLogprob{id, static_cast<float>(static_cast<double>(v) - lse)};
  }
}

__device__ void logprobs(const float* raw, int vocab, int token, float raw_max, int num_top,
                         RowResult* res, TopLogprob* top, Smem& s) {
  const float chosen = raw[token];
  const int n_top = min(num_top, vocab);
  if (n_top > 0) {
    for (int b = threadIdx.x; b < kBins; b += kThreads) s.work.hist.count[b] = 0;
  }
  __syncthreads();
  double sum = 0.0;
  uint32_t greater = 0;
  for_each(RowValues{raw, vocab}, [&](int, float v) {
    sum += static_cast<double>(expf(v - raw_max));
    greater += v > chosen ? 1u : 0u;
    if (n_top > 0) atomicAdd(&s.work.hist.count[float_key(v) >> 21], 1u);
  });
  __syncthreads();
  sum = block_sum(sum, s);
  greater = block_sum(greater, s);
  const double lse = static_cast<double>(raw_max) + log(sum);
  if (threadIdx.x == 0) {
    res->logprob = static_cast<float>(static_cast<double>(chosen) - lse);
    res->rank = static_cast<int>(greater) + 1;
    res->num_top = n_top;
  }
  if (n_top == 0) return;
  int bin;
  uint32_t above;
  const uint32_t k = static_cast<uint32_t>(n_top);
  find_crossing<uint32_t>(
      kBins, [&](int d) { return s.work.hist.count[d]; }, [&](uint32_t c) { return c >= k; }, &bin,
      &above, s);
  const uint32_t candidates = above + s.work.hist.count[bin];
  __syncthreads();  // count_select below clears the histogram
  int list_n = -1;
  if (candidates <= static_cast<uint32_t>(kListCap)) {
    const uint32_t b = static_cast<uint32_t>(bin);
    list_n = compact_row(raw, vocab, [&](float v, float*) { return (float_key(v) >> 21) >= b; }, s);
  }
  if (list_n >= 0) {
    const ListValues src{s.list_ids, s.list_vals, list_n};
    gather_top(src, count_select(src, k, s), n_top, s);
  } else {
    const RowValues src{raw, vocab};
    gather_top(src, count_select(src, k, s), n_top, s);
  }
  write_top(n_top, lse, top, s);
}

// skip_plain: the split path (sampling_plain.cu) samples the plain rows.
__global__ void __launch_bounds__(kThreads, 2) sample_kernel(SampleArgs args, bool skip_plain) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& s = *reinterpret_cast<Smem*>(smem_raw);
  const int row = blockIdx.x;
  const RowParams p = args.rows[row];
  if (skip_plain && is_plain(p)) return;
  const int vocab = args.vocab;
  const float* raw = args.logits + static_cast<int64_t>(row) * vocab;
  const float* x =
      p.processed_row >= 0 ? args.processed + static_cast<int64_t>(p.processed_row) * vocab : raw;
  const bool greedy = p.temperature == 0.0f;
  const bool want_logprobs = p.num_logprobs >= 0;
  const bool separate_raw = want_logprobs && x != raw;

  RowResult res;
  // A row whose first passes ran split (sampling_topk.cu, sampling_nucleus.cu) starts from
  // its candidates.
  int list_n = -1;
  float max = kNegInf;
  double total_all = -1.0;
  bool list_weights = false;
  if (args.topk_scratch != nullptr && takes_topk_split(p)) {
    const TopKScratch sc = TopKScratch::carve(args.topk_scratch, args.num_rows, vocab);
    list_n = gather_topk_candidates(sc, row, static_cast<uint32_t>(p.top_k), &max, s);
  } else if (args.nucleus_scratch != nullptr && takes_nucleus_split(p)) {
    const NucleusScratch sc = NucleusScratch::carve(args.nucleus_scratch, args.num_rows, vocab);
    double mass;
    list_n = gather_nucleus_candidates(sc, row, &max, &mass, s);
    list_weights = true;
    if (p.top_p < 1.0f) total_all = mass;
  }
  if (list_n >= 0) {
    if (!(max > kNegInf)) {
      res.status = kRowNoFiniteLogit;
    } else {
      res.token = sample_list(p, max, list_n, list_weights, total_all, s);
    }
    if (threadIdx.x == 0) {
      RowResult& out = args.results[row];
      out = RowResult{};
      out.token = res.token;
      out.status = res.status;
      if (args.feedback != nullptr) args.feedback[row] = res.token;
    }
    return;
  }

  // Pass 1 (also for split rows whose candidates did not fit).
  max = kNegInf;
  if (!greedy && p.top_k > 0) {
    for (int b = threadIdx.x; b < kBins; b += kThreads) s.work.hist.count[b] = 0;
    __syncthreads();
  }
  ArgMax best{kNegInf, INT_MAX};
  float raw_max = kNegInf;
  for_each(RowValues{x, vocab}, [&](int j, float v) {
    if (greedy) {
      best.take(v, j);
    } else {
      max = fmaxf(max, v);
      if (p.top_k > 0) atomicAdd(&s.work.hist.count[float_key(v) >> 21], 1u);
    }
    if (separate_raw) raw_max = fmaxf(raw_max, raw[j]);
  });
  __syncthreads();

  if (greedy) {
    best = block_argmax(best, s);
    res.token = best.id == INT_MAX ? 0 : best.id;
    max = best.value;
  } else {
    max = block_max(max, s);
    if (!(max > kNegInf)) {
      res.status = kRowNoFiniteLogit;
    } else {
      res.token = sample_random(x, vocab, p, max, s);
    }
  }
  if (want_logprobs && res.status == kRowOk) {
    raw_max = separate_raw ? block_max(raw_max, s) : max;
    if (!(raw_max > kNegInf)) {
      res.status = kRowNoFiniteRawLogit;
    } else {
      logprobs(raw, vocab, res.token, raw_max, p.num_logprobs, &args.results[row],
               args.top + static_cast<int64_t>(row) * args.top_stride, s);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    RowResult& out = args.results[row];
    out.token = res.token;
    if (args.feedback != nullptr) args.feedback[row] = res.token;
    out.status = res.status;
    if (!want_logprobs || res.status != kRowOk) {
      out.logprob = 0.0f;
      out.rank = 0;
      out.num_top = 0;
    }
  }
}

// One row per block: the raw max, then logprobs() for the given token.
__global__ void __launch_bounds__(kThreads, 2) token_logprobs_kernel(TokenLogprobsArgs args) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& s = *reinterpret_cast<Smem*>(smem_raw);
  const int row = blockIdx.x;
  const float* raw = args.logits + static_cast<int64_t>(row) * args.vocab;
  const int token = args.tokens[row];
  float raw_max = kNegInf;
  for_each(RowValues{raw, args.vocab}, [&](int, float v) { raw_max = fmaxf(raw_max, v); });
  __syncthreads();
  raw_max = block_max(raw_max, s);
  RowResult* res = &args.results[row];
  const bool finite = raw_max > kNegInf;
  if (finite) {
    logprobs(raw, args.vocab, token, raw_max, args.num_top, res,
             args.top + static_cast<int64_t>(row) * args.top_stride, s);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    res->token = token;
    res->status = finite ? kRowOk : kRowNoFiniteRawLogit;
    if (!finite) {
      res->logprob = 0.0f;
      res->rank = 0;
      res->num_top = 0;
    }
  }
}

}  // namespace

void token_logprobs(const TokenLogprobsArgs& args, cudaStream_t stream) {
  if (args.num_rows == 0) return;
  kernels::allow_dynamic_smem<token_logprobs_kernel>(static_cast<int>(sizeof(Smem)));
  token_logprobs_kernel<<<args.num_rows, kThreads, sizeof(Smem), stream>>>(args);
  KS_CUDA_CHECK_LAUNCH("token_logprobs_kernel");
}

void sample_rows(const SampleArgs& args, cudaStream_t stream) {
  if (args.num_rows == 0) return;
  launch_penalties(args, stream);
  const bool plain = args.num_plain != 0 && args.plain_scratch != nullptr;
  if (plain) launch_plain(args, stream);
  if (args.num_topk_split != 0 && args.topk_scratch != nullptr) launch_topk_segments(args, stream);
  if (args.num_nucleus_split != 0 && args.nucleus_scratch != nullptr) {
    launch_nucleus_segments(args, stream);
  }
  if (plain && args.num_plain == args.num_rows) return;
  kernels::allow_dynamic_smem<sample_kernel>(static_cast<int>(sizeof(Smem)));
  sample_kernel<<<args.num_rows, kThreads, sizeof(Smem), stream>>>(args, plain);
  KS_CUDA_CHECK_LAUNCH("sample_kernel");
}

}  // namespace kestrel::sampling_kernels
