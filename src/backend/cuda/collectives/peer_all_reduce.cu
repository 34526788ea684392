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

#include "backend/cuda/collectives/peer_all_reduce_device.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"

namespace kestrel::kernels {
namespace {

using namespace peer;

constexpr int kThreads = 512;

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
    wait_or_abort([&] { return static_cast<int32_t>(ld_acquire_sys(flag) - e) < 0; }, a.abort);
  }
  __syncthreads();

  constexpr int kN = Vec<T>::kN;
  auto* out = static_cast<uint4*>(a.data);
  for (int64_t i = first; i < a.vecs; i += stride) {
    uint4 v[W];
#pragma unroll
    for (int p = 0; p < W; ++p) v[p] = reinterpret_cast<const uint4*>(a.bases[p] + off)[i];
    float acc[kN];
    sum_in_rank_order<T, W>(v, acc);
    store_sum<Vec<T>>(acc, out, static_cast<uint4*>(a.residual), i);
  }
}

template <typename T>
void launch(const PeerAllReduceArgs& a, int world, cudaStream_t stream) {
  with_world(world, [&](auto w) {
    launch_pdl("peer_all_reduce_kernel", peer_all_reduce_kernel<T, decltype(w)::value>,
               dim3(kPeerBlocks), dim3(kThreads), 0, stream, a);
  });
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
