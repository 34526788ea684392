// The kernel of PeerAllReduce (peer_all_reduce.h): one-shot all-reduce over peer-mapped memory.
//
// Maths: data[i] = sum over ranks p = 0..W-1, in that order, of rank p's data[i]; the sum in
// fp32, rounded once to the element type (so every rank gets the same bits; with two ranks
// this is the correctly rounded sum of two bf16 values, as NCCL's). With a residual:
// residual[i] = round(residual[i] + data[i]) after that, data[i] as rounded (add_into's add),
// so a row-parallel product's residual add costs no kernel of its own.
// Layout of each rank's allocation: [flags: kMaxRanks x kBlocks u32, padded to kFlagsBytes]
// [buffer 0: capacity bytes][buffer 1: capacity bytes]; flags[src][b] holds the last call
// number that rank src's block b posted here.
// Geometry: kPeerBlocks (32) blocks of 512 threads, fixed for every call (so block b's call numbers
// and buffer parity agree across calls of any size); block b owns the 16-byte vectors
// b*512 + t + k*kBlocks*512 in both phases, so a block waits for the same block of each peer.
#include "backend/cuda/collectives/peer_all_reduce_kernel.h"

#include <cuda_bf16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"

namespace kestrel::kernels {
namespace {

constexpr int kThreads = 512;

__device__ __forceinline__ void st_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t ld_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
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

template <typename T, int W>
__global__ void __launch_bounds__(kThreads) peer_all_reduce_kernel(const __grid_constant__ PeerAllReduceArgs a) {
  __shared__ uint32_t call;
  const int b = blockIdx.x;
  // Launched with PDL (launch.cuh): the data and this rank's counters are earlier kernels'.
  // The dependents (the next product, which streams its weights before its own wait) may
  // start at once: they wait for this grid's completion before reading what it writes.
  pdl_wait();
  pdl_trigger();
  if (threadIdx.x == 0) call = a.counter[b] = a.counter[b] + 1;
  __syncthreads();
  const uint32_t e = call;
  const size_t off = kPeerFlagsBytes + (e & 1) * a.capacity;
  const int64_t stride = int64_t{kPeerBlocks} * kThreads;
  const int64_t first = int64_t{b} * kThreads + threadIdx.x;

  const auto* in = static_cast<const uint4*>(a.data);
  auto* mine = reinterpret_cast<uint4*>(a.bases[a.rank] + off);
  for (int64_t i = first; i < a.vecs; i += stride) mine[i] = in[i];
  __syncthreads();  // the block's writes, made visible to peers by the release below
  if (threadIdx.x < W) {
    const int p = threadIdx.x;
    st_release_sys(reinterpret_cast<uint32_t*>(a.bases[p]) + a.rank * kPeerBlocks + b, e);
    const uint32_t* flag = reinterpret_cast<const uint32_t*>(a.bases[a.rank]) + p * kPeerBlocks + b;
    // Call numbers only grow (wrapping): a peer may already have posted the next call.
    for (int spin = 1; static_cast<int32_t>(ld_acquire_sys(flag) - e) < 0; ++spin) {
      if (spin % 64 == 0 && *a.abort != 0) break;  // a failing group: return, result garbage
    }
  }
  __syncthreads();

  constexpr int kN = Vec<T>::kN;
  auto* out = static_cast<uint4*>(a.data);
  for (int64_t i = first; i < a.vecs; i += stride) {
    uint4 v[W];
#pragma unroll
    for (int p = 0; p < W; ++p) v[p] = reinterpret_cast<const uint4*>(a.bases[p] + off)[i];
    float acc[kN], x[kN];
    Vec<T>::load(v[0], acc);
#pragma unroll
    for (int p = 1; p < W; ++p) {
      Vec<T>::load(v[p], x);
#pragma unroll
      for (int j = 0; j < kN; ++j) acc[j] += x[j];
    }
    const uint4 sum = Vec<T>::store(acc);
    out[i] = sum;
    if (a.residual != nullptr) {
      auto* res = static_cast<uint4*>(a.residual);
      float r[kN];
      Vec<T>::load(res[i], r);
      Vec<T>::load(sum, x);  // the sum as rounded
#pragma unroll
      for (int j = 0; j < kN; ++j) r[j] += x[j];
      res[i] = Vec<T>::store(r);
    }
  }
}

template <typename T>
void launch(const PeerAllReduceArgs& a, int world, cudaStream_t stream) {
  auto go = [&](auto kernel) {
    launch_pdl("peer_all_reduce_kernel", kernel, dim3(kPeerBlocks), dim3(kThreads), 0, stream, a);
  };
  switch (world) {
    case 2: go(peer_all_reduce_kernel<T, 2>); break;
    case 3: go(peer_all_reduce_kernel<T, 3>); break;
    case 4: go(peer_all_reduce_kernel<T, 4>); break;
    case 5: go(peer_all_reduce_kernel<T, 5>); break;
    case 6: go(peer_all_reduce_kernel<T, 6>); break;
    case 7: go(peer_all_reduce_kernel<T, 7>); break;
    case 8: go(peer_all_reduce_kernel<T, 8>); break;
    default: break;  // the entry point admits 2..kPeerMaxRanks only
  }
  KS_CUDA_CHECK_LAUNCH("peer_all_reduce_kernel");
}

}  // namespace

void peer_all_reduce(const PeerAllReduceArgs& args, int world, bool bf16, cudaStream_t stream) {
  if (bf16) {
    launch<__nv_bfloat16>(args, world, stream);
  } else {
    launch<float>(args, world, stream);
  }
}

}  // namespace kestrel::kernels
