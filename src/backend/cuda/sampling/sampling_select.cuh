// Selection passes of the sampler over a source (sampling_device.cuh), all block-wide:
//  - count_select: the k-th largest value by radix select on its 32-bit key (three
//    histogram levels of 11, 11 and 10 bits), for top_k and the top logprobs;
//  - top_p_cut: the weight at which the mass, in (weight desc, id asc) order, reaches
//    top_p of the total, by the same radix levels over weight bits with mass histograms;
//  - draw: the inverse-CDF pick in ascending id order by a two-level prefix sum (chunk
//    masses, then one warp scanning the chunk that holds the target);
//  - compact_row / gather_top: ordered compaction into shared memory.
// No function sorts the vocab. Each starts and ends at a barrier and leaves its result
// block-uniform.
#pragma once

#include "backend/cuda/sampling/sampling_device.cuh"

namespace kestrel::sampling_kernels {

__device__ __forceinline__ unsigned long long to_bits(double v) {
  return static_cast<unsigned long long>(__double_as_longlong(v));
}
__device__ __forceinline__ unsigned long long to_bits(unsigned long long v) { return v; }
__device__ __forceinline__ unsigned long long to_bits(uint32_t v) { return v; }
template <typename T>
__device__ __forceinline__ T from_bits(unsigned long long b);
template <>
__device__ __forceinline__ double from_bits<double>(unsigned long long b) {
  return __longlong_as_double(static_cast<long long>(b));
}
template <>
__device__ __forceinline__ unsigned long long from_bits<unsigned long long>(unsigned long long b) {
  return b;
}
template <>
__device__ __forceinline__ uint32_t from_bits<uint32_t>(unsigned long long b) {
  return static_cast<uint32_t>(b);
}

// Over bins nb-1 down to 0 with amounts load(d): finds the bin d where the running sum from
// the top first reaches (reach(sum over bins >= d) true, reach(sum over bins > d) false).
// reach must be monotone. Returns false when even the whole sum does not reach; else sets
// *bin and *above (the sum over bins > d). S: Smem or any struct with its scan_tmp,
// found_bin and found_value.
template <typename T, typename Load, typename Reach, typename S>
__device__ bool find_crossing(int nb, Load load, Reach reach, int* bin, T* above, S& s) {
  constexpr int kMaxPer = kBins / kThreads;
  const int per = nb / kThreads;
  T local[kMaxPer];
  T sum = T(0);
#pragma unroll
  for (int i = 0; i < kMaxPer; ++i) {
    local[i] = i < per ? load(nb - 1 - (threadIdx.x * per + i)) : T(0);
    sum += local[i];
  }
  if (threadIdx.x == 0) s.found_bin = -1;
  T total;
  T run = block_exclusive_scan(sum, &total, s);
#pragma unroll
  for (int i = 0; i < kMaxPer; ++i) {
    if (i >= per) break;
    const T next = run + local[i];
    if (!reach(run) && reach(next)) {
      s.found_bin = nb - 1 - (threadIdx.x * per + i);
      s.found_value = to_bits(run);
    }
    run = next;
  }
  __syncthreads();
  *bin = s.found_bin;
  *above = from_bits<T>(s.found_value);
  __syncthreads();
  return *bin >= 0;
}

struct Selected {
  uint32_t key;    // float_key of the k-th largest value
  uint32_t above;  // elements with a larger key
};

// The k-th largest value of the source. REQUIRES: 1 <= k <= src.size().
template <typename Src>
__device__ Selected count_select(const Src& src, uint32_t k, Smem& s) {
  uint32_t prefix = 0, mask = 0, above = 0;
  for (int level = 0; level < kLevels; ++level) {
    const int shift = level_shift(level), nb = level_bins(level);
    for (int b = threadIdx.x; b < nb; b += kThreads) s.work.hist.count[b] = 0;
    __syncthreads();
    for_each(src, [&](int, float v) {
      const uint32_t key = float_key(v);
      if ((key & mask) == prefix) atomicAdd(&s.work.hist.count[(key >> shift) & (nb - 1)], 1u);
    });
    __syncthreads();
    const uint32_t need = k - above;
    int bin;
    uint32_t more;
    if (!find_crossing<uint32_t>(
            nb, [&](int d) { return s.work.hist.count[d]; },
            [&](uint32_t c) { return c >= need; }, &bin, &more, s)) {
      bin = 0;  // unreachable under the precondition
      more = 0;
    }
    above += more;
    prefix |= static_cast<uint32_t>(bin) << shift;
    mask |= static_cast<uint32_t>(nb - 1) << shift;
  }
  return {prefix, above};
}

struct TopPCut {
  bool active = false;      // false: top_p keeps every candidate
  bool limit_ties = false;  // only the n_tie lowest ids of weight tau are kept
  float tau = 0.0f;         // weight of the last kept token in (weight desc, id asc) order
  uint32_t n_tie = 0;
};

// top_p over a weight source: the shortest prefix, in (weight desc, id asc) order, whose
// mass reaches top_p * total, where total is `total_all` when >= 0 (the source then holds a
// superset of that prefix) and the source's own mass otherwise.
template <typename Src>
__device__ TopPCut top_p_cut(const Src& src, float top_p, double total_all, Smem& s) {
  uint32_t prefix = 0, mask = 0, count_eq = 0;
  unsigned long long above = 0;
  double target = 0.0;
  for (int level = 0; level < kLevels; ++level) {
    const int shift = level_shift(level), nb = level_bins(level);
    for (int b = threadIdx.x; b < nb; b += kThreads) {
      s.work.hist.count[b] = 0;
      s.work.hist.mass_lo[b] = 0;
      s.work.hist.mass_hi[b] = 0;
    }
    __syncthreads();
    for_each(src, [&](int, float w) {
      const uint32_t key = __float_as_uint(w);  // w >= 0: the bits are in weight order
      if (w > 0.0f && (key & mask) == prefix) {
        const int d = (key >> shift) & (nb - 1);
        atomicAdd(&s.work.hist.count[d], 1u);
        add_fixed(&s.work.hist.mass_lo[d], &s.work.hist.mass_hi[d], to_fixed(w));
      }
    });
    __syncthreads();
    if (level == 0) {
      double total = total_all;
      if (total < 0.0) {
        unsigned long long t = 0;
        for (int b = threadIdx.x; b < nb; b += kThreads) t += read_fixed(s, b);
        total = static_cast<double>(block_sum(t, s)) / kFixedScale;
      }
      target = static_cast<double>(top_p) * total;
    }
    const double base = static_cast<double>(above) / kFixedScale;
    int bin;
    unsigned long long more;
    if (!find_crossing<unsigned long long>(
            nb, [&](int d) { return static_cast<unsigned long long>(read_fixed(s, d)); },
            [&](unsigned long long m) { return base + static_cast<double>(m) / kFixedScale >= target; },
            &bin, &more, s)) {
      return TopPCut{};  // rounding left the target unreached: keep every candidate (as the CPU)
    }
    above += more;
    prefix |= static_cast<uint32_t>(bin) << shift;
    mask |= static_cast<uint32_t>(nb - 1) << shift;
    if (level == kLevels - 1) count_eq = s.work.hist.count[bin];
  }
  __syncthreads();
  TopPCut cut;
  cut.active = true;
  cut.tau = __uint_as_float(prefix);
  // The run of tokens of weight tau, taken by ascending id, that first reaches the target.
  const double mass_above = static_cast<double>(above) / kFixedScale;
  const double tau = cut.tau;
  const double need = target - mass_above;
  double j = need <= 0.0 ? 1.0 : fmin(ceil(need / tau), static_cast<double>(count_eq));
  j = fmax(j, 1.0);
  while (j > 1.0 && mass_above + (j - 1.0) * tau >= target) j -= 1.0;
  while (j < count_eq && mass_above + j * tau < target) j += 1.0;
  cut.n_tie = static_cast<uint32_t>(j);
  cut.limit_ties = cut.n_tie < count_eq;
  return cut;
}

// Which weights survive top_p (given its cut) and min_p. A token of weight 0 never does.
struct Keep {
  float min_p = 0.0f;
  TopPCut cut;
  __device__ bool is_tie(float w) const {
    return cut.active && cut.limit_ties && w == cut.tau;
  }
  __device__ bool kept(float w, uint32_t tie_rank) const {
    if (!(w > 0.0f)) return false;
    if (min_p > 0.0f && w < min_p) return false;
    if (!cut.active || w > cut.tau) return true;
    return w == cut.tau && (!cut.limit_ties || tie_rank < cut.n_tie);
  }
};

// Inverse CDF over the kept weights in ascending id order: the first id whose running sum
// exceeds u * (sum of kept weights); the last kept id if rounding never lets it.
// Phase 0 (only when top_p keeps part of a run of equal weights) counts those ties per
// chunk, phase 1 sums the kept mass per chunk (one warp per chunk), phase 2 lets one warp
// scan the chunk that holds the target.
template <typename Src>
__device__ int draw(const Src& src, const Keep& keep, float u, Smem& s) {
  const int n = src.size();
  const int chunk = max(32, ((n + kMaxChunks - 1) / kMaxChunks + 31) / 32 * 32);
  const int num_chunks = (n + chunk - 1) / chunk;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const uint32_t lanes_below = (1u << lane) - 1u;
  const bool ranks = keep.cut.active && keep.cut.limit_ties;
  constexpr int kPer = kMaxChunks / kThreads;
  const int my_first = threadIdx.x * kPer;

  if (ranks) {
    for (int c = warp; c < num_chunks; c += kWarps) {
      uint32_t ties = 0;
      const int end = min(n, (c + 1) * chunk);
      for (int j0 = c * chunk; j0 < end; j0 += 32) {
        const int j = j0 + lane;
        const bool tie = j < end && keep.is_tie(src.value(src.load(j)));
        ties += __popc(__ballot_sync(kFullMask, tie));
      }
      if (lane == 0) s.work.chunks.ties[c] = ties;
    }
    __syncthreads();
    uint32_t local[kPer], sum = 0;
    for (int i = 0; i < kPer; ++i) {
      local[i] = my_first + i < num_chunks ? s.work.chunks.ties[my_first + i] : 0u;
      sum += local[i];
    }
    uint32_t total;
    uint32_t run = block_exclusive_scan(sum, &total, s);
    for (int i = 0; i < kPer; ++i) {
      if (my_first + i < num_chunks) s.work.chunks.ties[my_first + i] = run;
      run += local[i];
    }
    __syncthreads();
  }

  for (int c = warp; c < num_chunks; c += kWarps) {
    double sum = 0.0;
    uint32_t rank = ranks ? s.work.chunks.ties[c] : 0u;
    const int end = min(n, (c + 1) * chunk);
    for (int j0 = c * chunk; j0 < end; j0 += 32) {
      const int j = j0 + lane;
      const float w = j < end ? src.value(src.load(j)) : 0.0f;
      const uint32_t tb = ranks ? __ballot_sync(kFullMask, keep.is_tie(w)) : 0u;
      if (keep.kept(w, rank + __popc(tb & lanes_below))) sum += w;
      rank += __popc(tb);
    }
    sum = warp_sum(sum);
    if (lane == 0) s.work.chunks.sum[c] = sum;
  }
  __syncthreads();

  double local[kPer], sum = 0.0;
  for (int i = 0; i < kPer; ++i) {
    local[i] = my_first + i < num_chunks ? s.work.chunks.sum[my_first + i] : 0.0;
    sum += local[i];
  }
  double total;
  double run = block_exclusive_scan(sum, &total, s);
  const double target = static_cast<double>(u) * total;
  if (threadIdx.x == 0) {
    s.found_index = -1;
    s.found_bin = -1;  // the last chunk holding mass, for when rounding never crosses
  }
  __syncthreads();
  for (int i = 0; i < kPer; ++i) {
    const int c = my_first + i;
    if (c >= num_chunks) break;
    const double next = run + local[i];
    if (local[i] > 0.0) {
      if (run <= target && next > target) s.found_index = c;
      atomicMax(&s.found_bin, c);
    }
    s.work.chunks.sum[c] = run;  // now the exclusive prefix
    run = next;
  }
  __syncthreads();

  if (warp == 0) {
    const int c = max(s.found_index >= 0 ? s.found_index : s.found_bin, 0);
    double acc = s.work.chunks.sum[c];
    uint32_t rank = ranks ? s.work.chunks.ties[c] : 0u;
    const int end = min(n, (c + 1) * chunk);
    int token = -1, last = -1;
    for (int j0 = c * chunk; j0 < end && token < 0; j0 += 32) {
      const int j = j0 + lane;
      const float w = j < end ? src.value(src.load(j)) : 0.0f;
      const uint32_t tb = ranks ? __ballot_sync(kFullMask, keep.is_tie(w)) : 0u;
      const bool k = keep.kept(w, rank + __popc(tb & lanes_below));
      const double inc = warp_inclusive_scan(k ? static_cast<double>(w) : 0.0);
      const uint32_t hit = __ballot_sync(kFullMask, k && acc + inc > target);
      const uint32_t kb = __ballot_sync(kFullMask, k);
      if (hit != 0) token = src.id(j0 + __ffs(hit) - 1);
      if (kb != 0) last = src.id(j0 + 31 - __clz(kb));
      acc += __shfl_sync(kFullMask, inc, 31);
      rank += __popc(tb);
    }
    if (lane == 0) s.token = token >= 0 ? token : last;
  }
  __syncthreads();
  return s.token;
}

// Appends to the shared list, in ascending index order, every element j of x[0, n) for
// which take(x[j], &stored) is true, with list_ids = j and list_vals = stored. Returns the
// count, or -1 (list left incomplete) when it would exceed kListCap.
template <typename Take>
__device__ int compact_row(const float* x, int n, Take take, Smem& s) {
  constexpr int kItems = 8;
  int count = 0;
  for (int base = 0; base < n; base += kThreads * kItems) {
    const int first = base + threadIdx.x * kItems;
    float v[kItems];
#pragma unroll
    for (int i = 0; i < kItems; ++i) v[i] = first + i < n ? x[first + i] : kNegInf;
    uint32_t flags = 0, mine = 0;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      if (first + i < n && take(v[i], &v[i])) {
        flags |= 1u << i;
        ++mine;
      }
    }
    uint32_t total;
    uint32_t at = block_exclusive_scan(mine, &total, s) + count;
    if (count + static_cast<int>(total) > kListCap) return -1;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      if (flags >> i & 1u) {
        s.list_ids[at] = first + i;
        s.list_vals[at] = v[i];
        ++at;
      }
    }
    count += static_cast<int>(total);
  }
  __syncthreads();
  return count;
}

// Keeps, in place and in order, the elements of the shared list [0, n) whose value passes
// take(value); returns their count. REQUIRES n <= kListCap. Every thread reads its items
// before the scan's barriers and writes at or below them after, so no item is overwritten
// unread.
template <typename Take>
__device__ int compact_list(int n, Take take, Smem& s) {
  constexpr int kItems = kListCap / kThreads;
  const int first = threadIdx.x * kItems;
  int ids[kItems];
  float v[kItems];
  uint32_t flags = 0, mine = 0;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const bool in = first + i < n;
    ids[i] = in ? s.list_ids[first + i] : 0;
    v[i] = in ? s.list_vals[first + i] : 0.0f;
    if (in && take(v[i])) {
      flags |= 1u << i;
      ++mine;
    }
  }
  uint32_t total;
  uint32_t at = block_exclusive_scan(mine, &total, s);
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    if (flags >> i & 1u) {
      s.list_ids[at] = ids[i];
      s.list_vals[at] = v[i];
      ++at;
    }
  }
  __syncthreads();
  return static_cast<int>(total);
}

// Collects the n_top largest values of the source into s.work.top (unordered): every
// element above sel.key and the lowest ids of those equal to it.
template <typename Src>
__device__ void gather_top(const Src& src, Selected sel, int n_top, Smem& s) {
  constexpr int kItems = 8;
  const uint32_t need_ties = static_cast<uint32_t>(n_top) - sel.above;
  if (threadIdx.x == 0) s.counter = 0;
  __syncthreads();
  const int n = src.size();
  uint32_t ties_before = 0;
  for (int base = 0; base < n; base += kThreads * kItems) {
    const int first = base + threadIdx.x * kItems;
    float v[kItems];
    uint32_t mine = 0;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      v[i] = first + i < n ? src.value(src.load(first + i)) : kNegInf;
      mine += (first + i < n && float_key(v[i]) == sel.key) ? 1u : 0u;
    }
    uint32_t total;
    uint32_t rank = block_exclusive_scan(mine, &total, s) + ties_before;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      if (first + i >= n) break;
      const uint32_t key = float_key(v[i]);
      int slot = -1;
      if (key > sel.key) {
        slot = atomicAdd(&s.counter, 1);
      } else if (key == sel.key) {
        if (rank < need_ties) slot = static_cast<int>(sel.above + rank);
        ++rank;
      }
      if (slot >= 0) {
        s.work.top.ids[slot] = src.id(first + i);
        s.work.top.vals[slot] = v[i];
      }
    }
    ties_before += total;
  }
  __syncthreads();
}

}  // namespace kestrel::sampling_kernels
