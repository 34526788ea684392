// Launcher of the one-shot peer all-reduce kernel (peer_all_reduce.cu); the class around it,
// which maps the memory and agrees on it with the peers, is peer_all_reduce.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kestrel::kernels {

constexpr int kPeerMaxRanks = 8;
constexpr int kPeerBlocks = 32;
// The flags at the start of each rank's allocation: [kPeerMaxRanks][kPeerBlocks] u32.
constexpr size_t kPeerFlagsBytes = 4096;
static_assert(kPeerMaxRanks * kPeerBlocks * 4 <= kPeerFlagsBytes);

struct PeerAllReduceArgs {
  char* bases[kPeerMaxRanks];  // every rank's allocation, as this rank addresses it
  void* data;                  // the tensor, summed in place
  void* residual;              // null, or vecs vectors that the sum is added into
  int64_t vecs;                // its size in 16-byte vectors
  size_t capacity;             // bytes of one data buffer
  uint32_t* counter;           // [kPeerBlocks] this rank's call numbers, zeroed at start
  const volatile int* abort;   // non-zero: stop waiting for peers
  int rank;
};

// REQUIRES: 2 <= world <= kPeerMaxRanks; args.vecs * 16 <= args.capacity; data 16-byte aligned.
void peer_all_reduce(const PeerAllReduceArgs& args, int world, bool bf16, cudaStream_t stream);

}  // namespace kestrel::kernels
