// The two-shot kernel of PeerAllReduce (peer_all_reduce.h) for large tensors on three or
// more ranks: a reduce-scatter then an all-gather, both by stores into the peers' memory.
//
// Maths: the same as peer_all_reduce.cu, bit for bit: data[i] = the fp32 sum over ranks
// p = 0..W-1, in that order, rounded once; with a residual, residual[i] = round(residual[i]
// + data[i]).
//
// Why: the one-shot kernel has every rank read the whole tensor from every peer, (W - 1) x
// bytes into each GPU; at four ranks a 2 MiB decode all-reduce is 6 MiB over each GPU's links
// (~26 us on H200s, allreduce_bench). Here rank s owns shard s (a W-th of the vectors): every
// rank stores its copy of shard s into rank s's scatter area, rank s sums the W copies and
// stores the sum into every rank's gather area. Each GPU sends and receives 2 (W - 1) / W x
// bytes: 3 MiB at four ranks, the same 2 MiB as one-shot's at two (so two ranks keep one-shot).
// Stores cross NVLink without waiting for an answer, where the one-shot's loads wait.
//
// Layout of the two-shot region (at args.ts_offset in each rank's allocation): [flags:
// kPeerMaxRanks x kPeerMaxBlocks u32, kPeerFlagsBytes][scatter, parity 0][scatter, parity 1]
// [gather, parity 0][gather, parity 1], each area kPeerTwoShotAreaBytes(capacity).
// scatter[p] at p * q vectors holds rank p's copy of this rank's shard (q = ceil(vecs / W));
// gather holds the tensor's sums at their own indices.
// Geometry: kPeerBlocks blocks of 512 threads on every rank; block b handles the in-shard
// vectors j = b * 512 + t + k * B * 512 of every shard in both phases, so a block waits only
// for the same block of each peer.
// Call numbers and flags: ts_counter[b] counts this kernel's calls (the same on every rank:
// every rank runs every call). Block b of rank p posts 2e into flags[p][b] of every rank when
// its scatter stores of call e are out, 2e + 1 when its gather stores are; the counts only
// grow (wrapping), so one flag serves both phases.
// Reuse of the areas: a rank stores into a peer's area of parity e & 1 at call e after it
// has seen that peer's flag of call e (phase 1 of call e for the gather area) or of call e - 1
// (for the scatter area: every rank posts call e - 1's phase 2 before it waits on call e's
// phase 1, and it posts it from the kernel of call e - 1, which starts after the kernel of
// call e - 2, the area's last reader, has finished).
#include <cuda_bf16.h>

#include "backend/cuda/collectives/peer_all_reduce_device.cuh"
#include "backend/cuda/collectives/peer_all_reduce_kernel.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"

namespace kestrel::kernels {
namespace {

using namespace peer;

constexpr int kThreads = 512;

// Posts `value` into flags[rank][b] of every rank, then waits until every rank's
// flags[p][b] here has reached it. Threads 0..W-1 do it; the block's earlier stores are
// ordered before the post by the barrier and the release.
template <int W>
__device__ void exchange_flags(const PeerAllReduceArgs& a, int b, uint32_t value) {
  __syncthreads();
  if (threadIdx.x < W) {
    const int p = threadIdx.x;
    st_release_sys(reinterpret_cast<uint32_t*>(a.bases[p] + a.ts_offset) + a.rank * kPeerMaxBlocks + b,
                   value);
    const uint32_t* flag =
        reinterpret_cast<const uint32_t*>(a.bases[a.rank] + a.ts_offset) + p * kPeerMaxBlocks + b;
    wait_or_abort([&] { return static_cast<int32_t>(ld_acquire_sys(flag) - value) < 0; },
                  a.abort);
  }
  __syncthreads();
}

// A thread loads its vector of every shard before it stores any (phases 1 and 2), so that
// its W - 1 or W loads are in flight together, not one round trip per shard.
template <typename T, int W>
__global__ void __launch_bounds__(kThreads)
    peer_all_reduce_two_shot_kernel(const __grid_constant__ PeerAllReduceArgs a) {
  __shared__ uint32_t call;
  const int b = blockIdx.x;
  pdl_wait();  // launch.cuh: the data and the counters are earlier kernels'
  pdl_trigger();
  if (threadIdx.x == 0) call = a.ts_counter[b] = a.ts_counter[b] + 1;
  __syncthreads();
  const uint32_t e = call;
  const size_t area = kPeerTwoShotAreaBytes(a.capacity);
  const size_t scatter = a.ts_offset + kPeerFlagsBytes + (e & 1) * area;
  const size_t gather = a.ts_offset + kPeerFlagsBytes + (2 + (e & 1)) * area;
  const int64_t q = (a.vecs + W - 1) / W;  // vectors of a shard (the last ones may be short)
  int64_t lens[W];
#pragma unroll
  for (int s = 0; s < W; ++s) lens[s] = max(int64_t{0}, min(q, a.vecs - s * q));
  const int64_t stride = int64_t{gridDim.x} * kThreads;
  const int64_t first = int64_t{b} * kThreads + threadIdx.x;
  auto* data = static_cast<uint4*>(a.data);

  // Phase 1: this rank's copy of every other shard into its owner's scatter slot [rank].
  for (int64_t j = first; j < q; j += stride) {
    uint4 v[W];
#pragma unroll
    for (int s = 0; s < W; ++s) {
      if (s != a.rank && j < lens[s]) v[s] = data[s * q + j];
    }
#pragma unroll
    for (int s = 0; s < W; ++s) {
      if (s != a.rank && j < lens[s]) {
        reinterpret_cast<uint4*>(a.bases[s] + scatter)[a.rank * q + j] = v[s];
      }
    }
  }
  exchange_flags<W>(a, b, 2 * e);

  // Own shard: the sum over ranks in rank order, into the tensor and every peer's gather area.
  constexpr int kN = Vec<T>::kN;
  const auto* slots = reinterpret_cast<const uint4*>(a.bases[a.rank] + scatter);
  const int64_t base = a.rank * q, len = lens[a.rank];
  for (int64_t j = first; j < len; j += stride) {
    uint4 v[W];
#pragma unroll
    for (int p = 0; p < W; ++p) v[p] = p == a.rank ? data[base + j] : slots[p * q + j];
    float acc[kN];
    sum_in_rank_order<T, W>(v, acc);
    const uint4 sum = Vec<T>::store(acc);
    data[base + j] = sum;
#pragma unroll
    for (int p = 0; p < W; ++p) {
      if (p != a.rank) reinterpret_cast<uint4*>(a.bases[p] + gather)[base + j] = sum;
    }
  }
  exchange_flags<W>(a, b, 2 * e + 1);

  // Phase 2: the other shards' sums from the gather area; the residual add over every shard.
  const auto* sums = reinterpret_cast<const uint4*>(a.bases[a.rank] + gather);
  auto* residual = static_cast<uint4*>(a.residual);
  for (int64_t j = first; j < q; j += stride) {
    uint4 sum[W], res[W];
#pragma unroll
    for (int s = 0; s < W; ++s) {
      const int64_t i = s * q + j;
      if (j >= lens[s]) continue;
      sum[s] = s == a.rank ? data[i] : sums[i];
      if (residual != nullptr) res[s] = residual[i];
    }
#pragma unroll
    for (int s = 0; s < W; ++s) {
      const int64_t i = s * q + j;
      if (j >= lens[s]) continue;
      if (s != a.rank) data[i] = sum[s];
      if (residual != nullptr) residual[i] = residual_plus<Vec<T>>(res[s], sum[s]);
    }
  }
}

template <typename T>
void launch(const PeerAllReduceArgs& a, int world, cudaStream_t stream) {
  with_world(world, [&](auto w) {
    launch_pdl("peer_all_reduce_two_shot_kernel",
               peer_all_reduce_two_shot_kernel<T, decltype(w)::value>, dim3(a.ts_blocks),
               dim3(kThreads), 0, stream, a);
  });
  KS_CUDA_CHECK_LAUNCH("peer_all_reduce_two_shot_kernel");
}

}  // namespace

void peer_all_reduce_two_shot(const PeerAllReduceArgs& args, int world, bool bf16,
                              cudaStream_t stream) {
  if (bf16) {
    launch<__nv_bfloat16>(args, world, stream);
  } else {
    launch<float>(args, world, stream);
  }
}

}  // namespace kestrel::kernels
