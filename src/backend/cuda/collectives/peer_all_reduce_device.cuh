// Device pieces shared by the peer all-reduce kernels (peer_all_reduce.cu, the one-shot
// kernel; peer_all_reduce_ll.cu, the low-latency one): system-scope loads and stores of
// words other GPUs read and write, 16- and 4-byte groups of elements as floats, and the
// rounding of a sum and its add into the residual. Included by those two files only.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>

namespace kestrel::kernels::peer {

__device__ __forceinline__ void st_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t ld_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_relaxed_sys(uint64_t* p, uint64_t v) {
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ uint64_t ld_relaxed_sys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins while waiting() (which re-reads what it waits on) or until the group is aborted.
// The abort flag is mapped host memory: every read of it crosses PCIe, and with hundreds of
// threads of four GPUs spinning at once each such read takes tens of microseconds, long
// enough to make the peers wait in turn (session 19's allreduce_bench: calls stuck at ~27,
// ~57, ~120 or ~245 us, worse with more blocks). So it is read only once a wait has lasted
// kAbortPollAfterNs, which no healthy call's wait does, and then every kAbortPollSpins spins.
constexpr uint64_t kAbortPollAfterNs = 200'000;
constexpr uint32_t kAbortPollSpins = 1024;
template <typename Waiting>
__device__ __forceinline__ void wait_or_abort(Waiting waiting, const volatile int* abort) {
  uint64_t start = 0;
  for (uint32_t spin = 1; waiting(); ++spin) {
    if (spin % kAbortPollSpins != 0) continue;
    const uint64_t now = globaltimer_ns();
    if (start == 0) {
      start = now;
    } else if (now - start > kAbortPollAfterNs && *abort != 0) {
      return;  // a failing group: the caller's result is garbage
    }
  }
}

// 16 bytes of T as floats, and back.
template <typename T>
struct Vec;
template <>
struct Vec<float> {
  static constexpr int kN = 4;
  __device__ static void load(const uint4& v, float* f) {
    f[0] = __uint_as_float(v.x), f[1] = __uint_as_float(v.y), f[2] = __uint_as_float(v.z),
    f[3] = __uint_as_float(v.w);
  }
  __device__ static uint4 store(const float* f) {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]),
                      __float_as_uint(f[3]));
  }
};
template <>
struct Vec<__nv_bfloat16> {
  static constexpr int kN = 8;
  __device__ static void load(const uint4& v, float* f) {
    const auto* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 x = __bfloat1622float2(h[j]);
      f[2 * j] = x.x, f[2 * j + 1] = x.y;
    }
  }
  __device__ static uint4 store(const float* f) {
    uint4 v;
    auto* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
    for (int j = 0; j < 4; ++j) h[j] = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);
    return v;
  }
};

// A 4-byte piece of T as floats, and back.
template <typename T>
struct Piece;
template <>
struct Piece<float> {
  static constexpr int kN = 1;
  __device__ static void load(uint32_t v, float* f) { f[0] = __uint_as_float(v); }
  __device__ static uint32_t store(const float* f) { return __float_as_uint(f[0]); }
};
template <>
struct Piece<__nv_bfloat16> {
  static constexpr int kN = 2;
  __device__ static void load(uint32_t v, float* f) {
    __nv_bfloat162 h;
    memcpy(&h, &v, 4);
    const float2 x = __bfloat1622float2(h);
    f[0] = x.x, f[1] = x.y;
  }
  __device__ static uint32_t store(const float* f) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(f[0], f[1]);
    uint32_t v;
    memcpy(&v, &h, 4);
    return v;
  }
};

// acc = the fp32 sum of v[0..W), in that order (the rank order every kernel sums in).
template <typename T, int W>
__device__ __forceinline__ void sum_in_rank_order(const uint4 (&v)[W], float* acc) {
  float x[Vec<T>::kN];
  Vec<T>::load(v[0], acc);
#pragma unroll
  for (int p = 1; p < W; ++p) {
    Vec<T>::load(v[p], x);
#pragma unroll
    for (int j = 0; j < Vec<T>::kN; ++j) acc[j] += x[j];
  }
}

// round(residual + sum), `sum` already rounded (add_into's add), for a residual word
// already loaded.
template <typename G, typename Word>
__device__ __forceinline__ Word residual_plus(Word residual, Word sum) {
  float r[G::kN], x[G::kN];
  G::load(residual, r);
  G::load(sum, x);
#pragma unroll
  for (int j = 0; j < G::kN; ++j) r[j] += x[j];
  return G::store(r);
}

// residual[i] = round(residual[i] + sum), `sum` already rounded (add_into's add).
template <typename G, typename Word>
__device__ __forceinline__ void add_into_residual(Word sum, Word* residual, int64_t i) {
  residual[i] = residual_plus<G>(residual[i], sum);
}

// Stores the fp32 sum `acc` of element group i, rounded once, into out; with a residual,
// adds the sum as rounded into it. G: Vec<T> or Piece<T>.
template <typename G, typename Word>
__device__ __forceinline__ void store_sum(const float* acc, Word* out, Word* residual, int64_t i) {
  const Word sum = G::store(acc);
  out[i] = sum;
  if (residual != nullptr) add_into_residual<G>(sum, residual, i);
}

}  // namespace kestrel::kernels::peer
