// Launchers of the one-shot peer all-reduce kernels (peer_all_reduce.cu, and the low-latency
// one for the smallest tensors, peer_all_reduce_ll.cu); the class around them, which maps the
// memory and agrees on it with the peers, is peer_all_reduce.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace kestrel::kernels {

constexpr int kPeerMaxRanks = 8;
// The one-shot and two-shot kernels' grids by default.
constexpr int kPeerBlocks = 32;
// The most blocks their flags have room for (each grid is agreed per group).
constexpr int kPeerMaxBlocks = 128;
// The flags at the start of each rank's allocation: [kPeerMaxRanks][kPeerMaxBlocks] u32.
constexpr size_t kPeerFlagsBytes = 4096;
static_assert(kPeerMaxRanks * kPeerMaxBlocks * 4 <= kPeerFlagsBytes);
// The low-latency path: tensors of at most kPeerLlBytes, one 4-byte piece per thread of
// kPeerLlBlocks blocks. Its region, after the two data buffers, holds per call parity and
// source rank one 8-byte word (piece, call number) per piece: [2][kPeerMaxRanks][pieces].
constexpr size_t kPeerLlBytes = 16384;
constexpr int kPeerLlThreads = 512;
constexpr int kPeerLlBlocks = static_cast<int>(kPeerLlBytes / 4) / kPeerLlThreads;
constexpr size_t kPeerLlRegionBytes = 2 * kPeerMaxRanks * (kPeerLlBytes / 4) * 8;

// The two-shot kernel (large tensors at three or more ranks: peer_all_reduce.h): its region, after the low-latency one, holds flags like the one-shot's, then per
// call parity a scatter area and a gather area of this many bytes each (W shards of
// ceil(vecs / W) vectors: up to W - 1 vectors beyond the capacity).
__host__ __device__ constexpr size_t kPeerTwoShotAreaBytes(size_t capacity) { return capacity + 4096; }
constexpr size_t kPeerTwoShotRegionBytes(size_t capacity) {
  return kPeerFlagsBytes + 4 * kPeerTwoShotAreaBytes(capacity);
}

struct PeerAllReduceArgs {
  char* bases[kPeerMaxRanks];  // every rank's allocation, as this rank addresses it
  void* data;                  // the tensor, summed in place
  void* residual;              // null, or vecs vectors that the sum is added into
  int64_t vecs;                // its size in 16-byte vectors
  size_t capacity;             // bytes of one data buffer
  uint32_t* counter;           // [kPeerMaxBlocks] this rank's call numbers, zeroed at start
  int blocks;                  // the one-shot kernel's grid: 1..kPeerMaxBlocks, fixed per group
  bool unroll;                 // two ranks: a thread loads 4 vectors before it stores
  uint32_t* ll_counter;        // [kPeerLlBlocks] the same for the low-latency kernel
  size_t ll_offset;            // bytes from an allocation's start to its low-latency region
  uint32_t* ts_counter;        // [kPeerMaxBlocks] the same for the two-shot kernel
  size_t ts_offset;            // bytes from an allocation's start to its two-shot region
  int ts_blocks;               // the two-shot kernel's grid: 1..kPeerMaxBlocks, fixed per group
  const volatile int* abort;   // non-zero: stop waiting for peers
  int rank;
};

// Calls f(std::integral_constant<int, world>{}) for 2 <= world <= kPeerMaxRanks (the kernels
// are instantiated per world size); other sizes do nothing (the entry point admits none).
template <typename F>
void with_world(int world, F&& f) {
  switch (world) {
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 7: f(std::integral_constant<int, 7>{}); break;
    case 8: f(std::integral_constant<int, 8>{}); break;
    default: break;
  }
  static_assert(kPeerMaxRanks == 8, "one case per world size");
}

// REQUIRES: 2 <= world <= kPeerMaxRanks; args.vecs * 16 <= args.capacity; data 16-byte aligned.
// push (honoured at world 2 only; every rank passes the same): each rank stores its data into
// the peer's buffer instead of loading the peer's (peer_all_reduce.cu); the same bits.
void peer_all_reduce(const PeerAllReduceArgs& args, int world, bool bf16, bool push,
                     cudaStream_t stream);
// The same result (bit for bit) through the low-latency region. REQUIRES as above and
// args.vecs * 16 <= kPeerLlBytes.
void peer_all_reduce_ll(const PeerAllReduceArgs& args, int world, bool bf16, cudaStream_t stream);
// The same result (bit for bit) as a reduce-scatter and an all-gather through the two-shot
// region (peer_all_reduce_two_shot.cu). REQUIRES as peer_all_reduce.
void peer_all_reduce_two_shot(const PeerAllReduceArgs& args, int world, bool bf16,
                              cudaStream_t stream);

}  // namespace kestrel::kernels
