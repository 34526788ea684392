// Device building blocks of the sampler (included by sampling.cu only): the block geometry,
// the shared-memory layout, orderable float keys, the sampling weight, block-wide scans and
// reductions, and the "sources" the selection passes iterate over.
//
// A source is a sequence of (id, value) in ascending id order: either a whole row in global
// memory (RowValues / RowWeights, id = index) or a candidate list compacted into shared
// memory (ListValues / ListWeights). Value sources hold logits; weight sources hold the
// sampling weight of each element (0 for an element that top_k dropped). The selection code
// (sampling_select.cuh) is written once against both.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/sampling/sampling.h"

namespace kestrel::sampling_kernels {

constexpr int kThreads = 512;  // one block per row; two blocks fit an SM (launch bounds)
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFullMask = 0xffffffffu;

// Radix digits of a 32-bit key: 11 + 11 + 10 bits, so three levels resolve a key exactly.
constexpr int kBins = 2048;
constexpr int kLevels = 3;
__device__ __forceinline__ int level_shift(int level) { return level == 0 ? 21 : level == 1 ? 10 : 0; }
__device__ __forceinline__ int level_bins(int level) { return level == 2 ? 1024 : 2048; }

// Candidates held in shared memory; a row whose candidate set is larger runs its selection
// passes over the whole row in global memory instead.
constexpr int kListCap = 8192;
// Chunks of the draw's two-level prefix sum.
constexpr int kMaxChunks = 2048;
// Fixed-point scale of the top_p mass histograms (integer atomics are native in shared
// memory, float ones are compare-and-swap loops): weights <= 1, so 2^42 leaves room for
// 2^21 tokens in 64 bits; the resolution 2^-42 is far below what moves a top_p cut.
constexpr double kFixedScale = 4398046511104.0;  // 2^42

// Bins of a = (logit - max) / temperature over [-kARange, 0] for the top_p / min_p
// candidate bound (sampling.cu).
constexpr int kABins = kBins;
constexpr float kARange = 24.0f;

constexpr float kNegInf = -__builtin_huge_valf();

struct Smem {
  int list_ids[kListCap];
  float list_vals[kListCap];
  union {
    struct {
      uint32_t count[kBins];
      uint32_t mass_lo[kBins];  // fixed-point mass, low and high words (see add_fixed)
      uint32_t mass_hi[kBins];
    } hist;
    struct {
      double sum[kMaxChunks];   // kept mass per chunk, then its inclusive prefix
      uint32_t ties[kMaxChunks];  // top_p ties per chunk, then their exclusive prefix
    } chunks;
    struct {
      int ids[kMaxTopLogprobs];
      float vals[kMaxTopLogprobs];
    } top;
    struct {
      uint32_t first[kMaxChunks];   // a segment's first place in the shared list
      uint32_t count[kMaxChunks];
      uint32_t source[kMaxChunks];  // and in the row's global list (sampling_nucleus.h)
    } segments;
  } work;
  unsigned long long scan_tmp[kWarps + 1];
  // Block-uniform results handed from one thread to all.
  int found_bin;
  int found_index;
  unsigned long long found_value;
  int counter;
  int token;
};

// ---- keys and weights ------------------------------------------------------------------

// Unsigned key with the float order (-0 merged into +0, so equal floats get equal keys).
__device__ __forceinline__ uint32_t float_key(float x) {
  if (x == 0.0f) x = 0.0f;
  const uint32_t b = __float_as_uint(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float key_float(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// The CPU sampler's weight: expf((logit - max) / temperature) with both float operations
// rounded as on the host (no contraction). The exp is evaluated in double and rounded once,
// which is the correctly rounded expf; glibc's expf is within 0.502 ulp of it, so the two
// differ by one ulp in rare cases (docs/gpu_sampling.md).
__device__ __forceinline__ float sample_weight(float logit, float max, float temperature) {
  const float a = __fdiv_rn(__fsub_rn(logit, max), temperature);
  return static_cast<float>(exp(static_cast<double>(a)));
}

__device__ __forceinline__ uint64_t to_fixed(float w) {
  return __double2ull_rn(static_cast<double>(w) * kFixedScale);
}

// 64-bit fixed-point add from two native 32-bit atomics: the add that wraps the low word
// carries into the high one. Exact once all adds are done (read after a barrier).
__device__ __forceinline__ void add_fixed(uint32_t* lo, uint32_t* hi, uint64_t v) {
  const uint32_t vlo = static_cast<uint32_t>(v);
  uint32_t vhi = static_cast<uint32_t>(v >> 32);
  const uint32_t old = atomicAdd(lo, vlo);
  vhi += (old + vlo < old) ? 1u : 0u;
  if (vhi != 0) atomicAdd(hi, vhi);
}

__device__ __forceinline__ uint64_t read_fixed(const Smem& s, int bin) {
  return (static_cast<uint64_t>(s.work.hist.mass_hi[bin]) << 32) | s.work.hist.mass_lo[bin];
}

// ---- block-wide scans and reductions ---------------------------------------------------

template <typename T>
__device__ __forceinline__ T warp_inclusive_scan(T v) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const T n = __shfl_up_sync(kFullMask, v, o);
    if (lane >= o) v += n;
  }
  return v;
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// Exclusive prefix sum over the block in thread order; *total gets the sum of all. T is
// uint32_t, unsigned long long or double. Starts and ends with a barrier-safe use of
// s.scan_tmp, so calls may follow one another. S: Smem or any struct with its scan_tmp.
template <typename T, typename S>
__device__ T block_exclusive_scan(T v, T* total, S& s) {
  T* tmp = reinterpret_cast<T*>(s.scan_tmp);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const T inc = warp_inclusive_scan(v);
  if (lane == 31) tmp[warp] = inc;
  __syncthreads();
  if (warp == 0) {
    const T w = lane < kWarps ? tmp[lane] : T(0);
    const T wi = warp_inclusive_scan(w);
    if (lane < kWarps) tmp[lane] = wi - w;
    if (lane == kWarps - 1) tmp[kWarps] = wi;
  }
  __syncthreads();
  const T out = tmp[warp] + inc - v;
  *total = tmp[kWarps];
  __syncthreads();
  return out;
}

template <typename T, typename S>
__device__ T block_sum(T v, S& s) {
  T total;
  block_exclusive_scan(v, &total, s);
  return total;
}

template <typename S>
__device__ __forceinline__ float block_max(float v, S& s) {
  float* tmp = reinterpret_cast<float*>(s.scan_tmp);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  if (threadIdx.x % 32 == 0) tmp[threadIdx.x / 32] = v;
  __syncthreads();
  float m = tmp[0];
  for (int w = 1; w < kWarps; ++w) m = fmaxf(m, tmp[w]);
  __syncthreads();
  return m;
}

// Greedy's argmax: largest value, ties (and a row of -inf) to the lowest id; NaN never
// wins. Returns INT_MAX when every value is NaN.
struct ArgMax {
  float value;
  int id;
  __device__ void take(float v, int i) {
    if (v > value || (v == value && i < id)) {
      value = v;
      id = i;
    }
  }
};

__device__ __forceinline__ ArgMax block_argmax(ArgMax a, Smem& s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(kFullMask, a.value, o);
    const int i = __shfl_xor_sync(kFullMask, a.id, o);
    a.take(v, i);
  }
  float* vals = reinterpret_cast<float*>(s.scan_tmp);
  int* ids = reinterpret_cast<int*>(s.scan_tmp) + kWarps;
  if (threadIdx.x % 32 == 0) {
    vals[threadIdx.x / 32] = a.value;
    ids[threadIdx.x / 32] = a.id;
  }
  __syncthreads();
  ArgMax r{vals[0], ids[0]};
  for (int w = 1; w < kWarps; ++w) r.take(vals[w], ids[w]);
  __syncthreads();
  return r;
}

// ---- sources ---------------------------------------------------------------------------

struct RowValues {
  const float* x;
  int n;
  __device__ int size() const { return n; }
  __device__ int id(int j) const { return j; }
  __device__ float load(int j) const { return x[j]; }
  __device__ float value(float loaded) const { return loaded; }
};

struct ListValues {
  const int* ids;
  const float* vals;
  int n;
  __device__ int size() const { return n; }
  __device__ int id(int j) const { return ids[j]; }
  __device__ float load(int j) const { return vals[j]; }
  __device__ float value(float loaded) const { return loaded; }
};

// Weights computed from the logits on the fly; 0 below the top_k threshold `kth`.
struct RowWeights {
  const float* x;
  int n;
  float max;
  float temperature;
  float kth;
  __device__ int size() const { return n; }
  __device__ int id(int j) const { return j; }
  __device__ float load(int j) const { return x[j]; }
  __device__ float value(float logit) const {
    return logit >= kth ? sample_weight(logit, max, temperature) : 0.0f;
  }
};

struct ListWeights {
  const int* ids;
  const float* w;
  int n;
  __device__ int size() const { return n; }
  __device__ int id(int j) const { return ids[j]; }
  __device__ float load(int j) const { return w[j]; }
  __device__ float value(float loaded) const { return loaded; }
};

// Calls f(j, value) for every element, strided over the block, with several loads in
// flight per thread before the values are used. Order is unspecified.
template <typename Src, typename F>
__device__ __forceinline__ void for_each(const Src& src, F&& f) {
  constexpr int kUnroll = 8;
  const int n = src.size();
  int j = threadIdx.x;
  for (; j + (kUnroll - 1) * kThreads < n; j += kUnroll * kThreads) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = src.load(j + u * kThreads);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) f(j + u * kThreads, src.value(v[u]));
  }
  for (; j < n; j += kThreads) f(j, src.value(src.load(j)));
}

}  // namespace kestrel::sampling_kernels
