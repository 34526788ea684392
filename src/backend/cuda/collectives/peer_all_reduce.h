// PeerAllReduce: a one-shot all-reduce over peer-mapped device memory, for the small tensors of
// tensor parallelism's decode steps (two [T, H] all-reduces per layer, T <= a few hundred),
// where NCCL's ring pays ~20 us of latency for a few kilobytes (docs/parallel.md).
//
// How: every rank owns one device allocation, mapped into every other rank's address space
// (CUDA IPC between processes; the raw pointer with peer access between threads of one
// process). It holds two data buffers (alternating by call parity) and a flag per (source
// rank, block). A call is one kernel of a fixed grid (KESTREL_PEER_BLOCKS, default 32 blocks:
// the same for every call of a group): block b copies its share of the
// input into this rank's buffer, posts its call number to block b's flag on every peer,
// waits for every peer's flag, then sums block b's share over ranks, in rank order, from the
// peers' buffers into the tensor. Same order on every rank: every rank gets the same bits.
// Why two buffers suffice: a rank writes a buffer again two calls later, by when every peer
// has posted the call in between, which it does only after it has finished reading.
// The kernel is launched with programmatic dependent launch (launch.cuh) and lets its
// dependents start at once: the next product streams its weights while the ranks exchange
// flags (Qwen3-8B single stream at TP=4 on H200s: 2.447 -> 2.256 ms a token with the fused
// residual add; docs/parallel.md).
//
// Contract:
// - create() is collective (every rank of `host` calls it together, with its own device).
//   Every rank gets an instance, or every rank gets null: when a GPU cannot map a peer's
//   memory, IPC fails, the world size is 1 or above kMaxRanks, or KESTREL_CUSTOM_ALLREDUCE=0
//   on any rank. The ranks agree through `host`, so none waits on a kernel the others skip.
//   Tensors of at most kPeerLlBytes go to the low-latency kernel (peer_all_reduce_ll.cu)
//   unless KESTREL_PEER_LL=0 on any rank. Tensors of at least KESTREL_PEER_TWO_SHOT_BYTES
//   (512 KiB by default at three ranks and more, never at two; 0: never) go to the two-shot
//   kernel (peer_all_reduce_two_shot.cu) on KESTREL_PEER_TWO_SHOT_BLOCKS blocks (32). At two
//   ranks the one-shot kernel pushes (stores its data into the peer's buffer) unless
//   KESTREL_PEER_PUSH=0 on any rank, which makes it pull (load the peer's).
// - run(): data[0..n) of dtype BF16 or F32, summed over ranks in place (and optionally added
//   into a residual), enqueued on `stream` and capturable in a CUDA graph. REQUIRES: takes(bytes, data); every rank calls run
//   with the same n and dtype in the same order (the kernels pair up by call number).
// - abort() (any thread): kernels waiting for a peer return, leaving garbage in the tensor;
//   later calls return at once. For a group that is failing.
// - The destructor frees this rank's memory: the caller makes sure no peer still reads it
//   (a barrier after the last call), or that the group is broken.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cuda/collectives/peer_all_reduce_kernel.h"
#include "core/dtype.h"
#include "parallel/communicator.h"

namespace kestrel {

// A switch read from the environment and agreed by the ranks (the smallest wins, so that
// every rank sends the same tensors to the same kernel). Unset: `fallback`; set, clamped to
// [lo, hi].
int64_t agreed_env(Communicator& host, const char* name, int64_t fallback, int64_t lo, int64_t hi);

class PeerAllReduce {
 public:
  static constexpr int kMaxRanks = kernels::kPeerMaxRanks;
  // Bytes of one data buffer: covers decode batches up to 512 rows of hidden size 4096.
  static constexpr size_t kCapacity = size_t{4} << 20;

  static std::unique_ptr<PeerAllReduce> create(int device, Communicator& host);
  ~PeerAllReduce();
  PeerAllReduce(const PeerAllReduce&) = delete;
  PeerAllReduce& operator=(const PeerAllReduce&) = delete;

  // True when run() takes these bytes at this address: 16-byte multiples, at most kCapacity
  // (or less where KESTREL_PEER_MAX_BYTES says so on any rank: the ranks take the smallest,
  // so that they agree on which all-reduces go to NCCL).
  bool takes(size_t bytes, const void* data) const {
    return bytes > 0 && bytes <= max_bytes_ && bytes % 16 == 0 &&
           reinterpret_cast<uintptr_t>(data) % 16 == 0;
  }
  // With `residual` (n elements of dtype, 16-byte aligned, or null): after the sum, also
  // residual[i] = residual[i] + data[i], the sum rounded to dtype first, in the same kernel.
  void run(void* data, int64_t n, DType dtype, cudaStream_t stream, void* residual = nullptr);
  void abort();

 private:
  PeerAllReduce(int device, int rank, int world_size);

  const int device_, rank_, world_size_;
  void* local_ = nullptr;        // this rank's mapped allocation
  // [kPeerMaxBlocks + kPeerLlBlocks + kPeerMaxBlocks] call numbers (one-shot, low-latency,
  // two-shot kernels), this rank's alone
  uint32_t* counter_ = nullptr;
  bool low_latency_ = false;     // tensors of <= kPeerLlBytes take the low-latency kernel
  size_t max_bytes_ = kCapacity;
  // Tensors of two_shot_bytes_ and more take the two-shot kernel (reduce-scatter, all-gather:
  // peer_all_reduce_two_shot.cu) on two_shot_blocks_ blocks; SIZE_MAX: never.
  size_t two_shot_bytes_ = SIZE_MAX;
  int two_shot_blocks_ = kernels::kPeerBlocks;
  bool push_ = false;  // two ranks: the one-shot kernel stores into the peer's buffer
  int blocks_ = kernels::kPeerBlocks;  // the one-shot kernel's grid
  bool unroll_ = true;                 // two ranks: the one-shot kernel batches its loads
  volatile int* abort_host_ = nullptr;  // mapped pinned memory the kernels poll
  int* abort_device_ = nullptr;
  std::vector<void*> peers_;     // [world_size] every rank's allocation (this rank's too)
  std::vector<bool> opened_;     // which peers_ came from cudaIpcOpenMemHandle
};

}  // namespace kestrel
