// The kernel of PeerAllReduce (peer_all_reduce.h): one-shot all-reduce over peer-mapped memory.
//
// Maths: data[i] = sum over ranks p = 0..W-1, in that order, of rank p's data[i]; the sum in
// fp32, rounded once to the element type (so every rank gets the same bits; with two ranks
// this is the correctly rounded sum of two bf16 values, as NCCL's). With a residual:
// residual[i] = round(residual[i] + data[i]) after that, data[i] as rounded (add_into's add),
// so a row-parallel product's residual add costs no kernel of its own. With norm_w (bf16),
// also add_rms_norm's norm of each row (peer_all_reduce_device.cuh: the same bits), so the
// unfused decode path's norm after an all-reduce costs no kernel either.
// Layout of each rank's allocation: [flags: kMaxRanks x kBlocks u32, padded to kFlagsBytes]
// [buffer 0: capacity bytes][buffer 1: capacity bytes]; flags[src][b] holds the last call
// number that rank src's block b posted here.
// Geometry: kPeerBlocks (32) blocks of 512 threads, fixed for every call (so block b's call numbers
// and buffer parity agree across calls of any size); block b owns the 16-byte vectors
// b*512 + t + k*kBlocks*512 in both phases, so a block waits for the same block of each peer
// (with norm_w: whole rows b, b + kBlocks, ..., for the same reason).
#include "backend/cuda/collectives/peer_all_reduce_kernel.h"

#include <cuda_bf16.h>

#include "backend/cuda/collectives/peer_all_reduce_device.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"

namespace kestrel::kernels {
namespace {

using namespace peer;

constexpr int kThreads = 512;

template <typename T, int W, bool kNorm>
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
  // kNorm: block b owns whole rows b, b + kPeerBlocks, ... in both phases instead.
  const int64_t row_vecs = kNorm ? a.norm_row / 8 : 0;
  const int64_t rows = kNorm ? a.vecs / row_vecs : 0;

  const auto* in = static_cast<const uint4*>(a.data);
  auto* mine = reinterpret_cast<uint4*>(a.bases[a.rank] + off);
  if constexpr (kNorm) {
    for (int64_t row = b; row < rows; row += kPeerBlocks) {
      for (int64_t i = row * row_vecs + threadIdx.x; i < (row + 1) * row_vecs; i += kThreads) {
        mine[i] = in[i];
      }
    }
  } else {
    for (int64_t i = first; i < a.vecs; i += stride) mine[i] = in[i];
  }
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
  // acc = the fp32 sum over ranks of vector i.
  auto sum_into = [&](int64_t i, float* acc) {
    uint4 v[W];
#pragma unroll
    for (int p = 0; p < W; ++p) v[p] = reinterpret_cast<const uint4*>(a.bases[p] + off)[i];
    sum_in_rank_order<T, W>(v, acc);
  };
  if constexpr (kNorm) {
    auto sum_at = [&](int64_t i) {
      float acc[kN];
      sum_into(i, acc);
      return Vec<T>::store(acc);
    };
    __shared__ float scratch[kPeerNormRows * 32];
    for (int64_t row0 = b; row0 < rows; row0 += int64_t{kPeerNormRows} * kPeerBlocks) {
      int64_t chunk[kPeerNormRows];
      int n = 0;
#pragma unroll
      for (int r = 0; r < kPeerNormRows; ++r) {
        chunk[r] = row0 + int64_t{r} * kPeerBlocks;
        if (chunk[r] < rows) n = r + 1;
      }
      add_rms_norm_rows(a, chunk, n, sum_at, scratch);
    }
  } else {
    for (int64_t i = first; i < a.vecs; i += stride) {
      float acc[kN];
      sum_into(i, acc);
      store_sum<Vec<T>>(acc, static_cast<uint4*>(a.data), static_cast<uint4*>(a.residual), i);
    }
  }
}

template <typename T, bool kNorm>
void launch(const PeerAllReduceArgs& a, int world, cudaStream_t stream) {
  with_world(world, [&](auto w) {
    launch_pdl("peer_all_reduce_kernel", peer_all_reduce_kernel<T, decltype(w)::value, kNorm>,
               dim3(kPeerBlocks), dim3(kThreads), 0, stream, a);
  });
  KS_CUDA_CHECK_LAUNCH("peer_all_reduce_kernel");
}

}  // namespace

void peer_all_reduce(const PeerAllReduceArgs& args, int world, bool bf16, cudaStream_t stream) {
  if (args.norm_w != nullptr) {
    launch<__nv_bfloat16, true>(args, world, stream);
  } else if (bf16) {
    launch<__nv_bfloat16, false>(args, world, stream);
  } else {
    launch<float, false>(args, world, stream);
  }
}

}  // namespace kestrel::kernels
