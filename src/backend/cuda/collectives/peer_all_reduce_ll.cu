// The low-latency kernel of PeerAllReduce (peer_all_reduce.h) for the smallest all-reduces
// (at most kPeerLlBytes: a decode step of a few tokens), in the style of NCCL's LL protocol.
//
// Maths: the same as peer_all_reduce.cu, bit for bit: data[i] = the fp32 sum over ranks
// p = 0..W-1, in that order, rounded once; with a residual, residual[i] = round(residual[i]
// + data[i]).
//
// Why: the one-shot kernel's chain per call is its own copy in, a system-scope release of
// per-block flags, the peers' flags, then reads of every peer's buffer across NVLink: two
// crossings of the link and a fence. Here each thread owns one 4-byte piece (two bf16 or one
// f32) and writes it, with the call number in the same aligned 8-byte word, straight into
// its slot of every peer's region; it then waits on its own region's words for the other
// ranks' pieces, which arrive whole (an aligned 8-byte store is single-copy atomic), so there
// is no fence and no flag: one crossing of the link.
//
// Reuse of the region: words alternate by call parity, and a rank posts call e + 2 only after
// it received every peer's call e + 1, which a peer posts only after its call-e kernel has
// finished reading (each kernel waits for the one before: launch.cuh). A thread posts its
// piece even past the tensor's end, so every word of a parity carries the call number of its
// last call or of the one two calls before, never an older one that the 32-bit count could
// have wrapped back to. The call numbers are per block ([kPeerLlBlocks] counters of their
// own), equal on every rank since every rank runs every call.
#include <cuda_bf16.h>

#include "backend/cuda/collectives/peer_all_reduce_kernel.h"
#include "backend/cuda/collectives/peer_all_reduce_device.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"

namespace kestrel::kernels {
namespace {

using namespace peer;

constexpr int kPieces = static_cast<int>(kPeerLlBytes / 4);

template <typename T, int W>
__global__ void __launch_bounds__(kPeerLlThreads)
    peer_all_reduce_ll_kernel(const __grid_constant__ PeerAllReduceArgs a) {
  __shared__ uint32_t call;
  const int b = blockIdx.x;
  pdl_wait();  // launch.cuh: the data and the counters are earlier kernels'
  pdl_trigger();
  if (threadIdx.x == 0) call = a.ll_counter[b] = a.ll_counter[b] + 1;
  __syncthreads();
  const uint32_t e = call;
  const int i = b * kPeerLlThreads + threadIdx.x;  // this thread's piece
  const int64_t n = a.vecs * 4;                    // the tensor's pieces
  const size_t region = a.ll_offset + size_t(e & 1) * kPeerMaxRanks * kPieces * 8;
  const uint32_t own = i < n ? static_cast<const uint32_t*>(a.data)[i] : 0u;
  const uint64_t word = (uint64_t{e} << 32) | own;
#pragma unroll
  for (int p = 0; p < W; ++p) {
    if (p != a.rank) {
      st_relaxed_sys(reinterpret_cast<uint64_t*>(a.bases[p] + region) + a.rank * kPieces + i, word);
    }
  }
  if (i >= n) return;

  const auto* slots = reinterpret_cast<const uint64_t*>(a.bases[a.rank] + region);
  constexpr int kN = Piece<T>::kN;
  float acc[kN], x[kN];
#pragma unroll
  for (int p = 0; p < W; ++p) {
    uint32_t v = own;
    if (p != a.rank) {
      uint64_t w = 0;
      wait_or_abort(
          [&] {
            w = ld_relaxed_sys(slots + p * kPieces + i);
            return static_cast<uint32_t>(w >> 32) != e;
          },
          a.abort);
      v = static_cast<uint32_t>(w);
    }
    Piece<T>::load(v, p == 0 ? acc : x);
    if (p > 0) {
#pragma unroll
      for (int j = 0; j < kN; ++j) acc[j] += x[j];
    }
  }
  store_sum<Piece<T>>(acc, static_cast<uint32_t*>(a.data), static_cast<uint32_t*>(a.residual), i);
}

template <typename T>
void launch(const PeerAllReduceArgs& a, int world, cudaStream_t stream) {
  with_world(world, [&](auto w) {
    launch_pdl("peer_all_reduce_ll_kernel", peer_all_reduce_ll_kernel<T, decltype(w)::value>,
               dim3(kPeerLlBlocks), dim3(kPeerLlThreads), 0, stream, a);
  });
  KS_CUDA_CHECK_LAUNCH("peer_all_reduce_ll_kernel");
}

}  // namespace

void peer_all_reduce_ll(const PeerAllReduceArgs& args, int world, bool bf16, cudaStream_t stream) {
  if (bf16) {
    launch<__nv_bfloat16>(args, world, stream);
  } else {
    launch<float>(args, world, stream);
  }
}

}  // namespace kestrel::kernels
