// The kernel of PeerAllReduce (peer_all_reduce.h): one-shot all-reduce over peer-mapped memory.
//
// Maths: data[i] = sum over ranks p = 0..W-1, in that order, of rank p's data[i]; the sum in
// fp32, rounded once to the element type (so every rank gets the same bits; with two ranks
// this is the correctly rounded sum of two bf16 values, as NCCL's). With a residual:
// residual[i] = round(residual[i] + data[i]) after that, data[i] as rounded (add_into's add),
// so a row-parallel product's residual add costs no kernel of its own.
// Layout of each rank's allocation: [flags: kPeerMaxRanks x kPeerMaxBlocks u32, kPeerFlagsBytes]
// [buffer 0: capacity bytes][buffer 1: capacity bytes]; flags[src][b] holds the last call
// number that rank src's block b posted here.
// Geometry: a.blocks blocks of 512 threads, fixed per group (so block b's call numbers and
// buffer parity agree across calls of any size); block b owns the 16-byte vectors
// b*512 + t + k*blocks*512 in both phases, so a block waits for the same block of each peer.
//
// Two directions of the same exchange. Pull (any W): a rank copies its data into its own
// buffer and, after the flags, loads every peer's across NVLink; each load waits for its
// answer, so 32 blocks keep only so many bytes in flight (2 MiB at two ranks: 14.5 us on
// H200s, ~145 GB/s). Push (two ranks, PeerAllReduce's default there): a rank stores its data
// into the peer's buffer, which the peer then reads locally; stores cross the link without
// waiting for an answer. Buffer reuse is the same argument for both: a rank writes the buffer
// of parity e & 1 (its own or the peer's) again at call e + 2, after it has seen the peer's
// flag of call e + 1, which the peer posts from a kernel that starts after call e's kernel,
// the buffer's reader, has finished.
#include "backend/cuda/collectives/peer_all_reduce_kernel.h"

#include <cuda_bf16.h>

#include "backend/cuda/collectives/peer_all_reduce_device.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"

namespace kestrel::kernels {
namespace {

using namespace peer;

constexpr int kThreads = 512;

template <typename T, int W, bool kPush, int kU>
__global__ void __launch_bounds__(kThreads) peer_all_reduce_kernel(const __grid_constant__ PeerAllReduceArgs a) {
  static_assert(!kPush || W == 2, "a push buffer holds one peer's tensor");
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
  const int64_t stride = int64_t{a.blocks} * kThreads;
  const int64_t first = int64_t{b} * kThreads + threadIdx.x;

  const auto* in = static_cast<const uint4*>(a.data);
  // Pull: this rank's buffer holds its own data; push: the peer's buffer receives it.
  auto* mine = reinterpret_cast<uint4*>(a.bases[a.rank] + off);
  auto* dest = kPush ? reinterpret_cast<uint4*>(a.bases[1 - a.rank] + off) : mine;
  // kU vectors a thread loaded before any is stored: the stores may alias the loads for all
  // the compiler knows, so without this a thread has one load in flight.
  for (int64_t i = first; i < a.vecs; i += kU * stride) {
    uint4 v[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (i + u * stride < a.vecs) v[u] = in[i + u * stride];
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (i + u * stride < a.vecs) dest[i + u * stride] = v[u];
    }
  }
  __syncthreads();  // the block's writes, made visible to peers by the release below
  if (threadIdx.x < W) {
    const int p = threadIdx.x;
    st_release_sys(reinterpret_cast<uint32_t*>(a.bases[p]) + a.rank * kPeerMaxBlocks + b, e);
    const uint32_t* flag = reinterpret_cast<const uint32_t*>(a.bases[a.rank]) + p * kPeerMaxBlocks + b;
    // Call numbers only grow (wrapping): a peer may already have posted the next call.
    wait_or_abort([&] { return static_cast<int32_t>(ld_acquire_sys(flag) - e) < 0; }, a.abort);
  }
  __syncthreads();

  constexpr int kN = Vec<T>::kN;
  auto* out = static_cast<uint4*>(a.data);
  for (int64_t i0 = first; i0 < a.vecs; i0 += kU * stride) {
    uint4 v[kU][W];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t i = i0 + u * stride;
      if (i >= a.vecs) continue;
#pragma unroll
      for (int p = 0; p < W; ++p) {
        if constexpr (kPush) {
          v[u][p] = p == a.rank ? in[i] : mine[i];
        } else {
          v[u][p] = reinterpret_cast<const uint4*>(a.bases[p] + off)[i];
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t i = i0 + u * stride;
      if (i >= a.vecs) continue;
      float acc[kN];
      sum_in_rank_order<T, W>(v[u], acc);
      store_sum<Vec<T>>(acc, out, static_cast<uint4*>(a.residual), i);
    }
  }
}

// Vectors a thread loads before it stores: 4 at two ranks (A/B: KESTREL_PEER_UNROLL=0 loads
// one), 1 at more (each vector is W loads already, and W x 4 of them would crowd registers).
template <typename T, int W, bool kPush>
void launch_unrolled(const PeerAllReduceArgs& a, cudaStream_t stream) {
  if (W == 2 && a.unroll) {
    launch_pdl("peer_all_reduce_kernel", peer_all_reduce_kernel<T, W, kPush, 4>, dim3(a.blocks),
               dim3(kThreads), 0, stream, a);
  } else {
    launch_pdl("peer_all_reduce_kernel", peer_all_reduce_kernel<T, W, kPush, 1>, dim3(a.blocks),
               dim3(kThreads), 0, stream, a);
  }
}

template <typename T>
void launch(const PeerAllReduceArgs& a, int world, bool push, cudaStream_t stream) {
  if (push && world == 2) {
    launch_unrolled<T, 2, true>(a, stream);
  } else {
    with_world(world, [&](auto w) { launch_unrolled<T, decltype(w)::value, false>(a, stream); });
  }
  KS_CUDA_CHECK_LAUNCH("peer_all_reduce_kernel");
}

}  // namespace

void peer_all_reduce(const PeerAllReduceArgs& args, int world, bool bf16, bool push,
                     cudaStream_t stream) {
  if (bf16) {
    launch<__nv_bfloat16>(args, world, push, stream);
  } else {
    launch<float>(args, world, push, stream);
  }
}

}  // namespace kestrel::kernels
