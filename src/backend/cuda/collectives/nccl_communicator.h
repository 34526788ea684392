// NcclCommunicator: the CUDA backend's tensor collectives (communicator.h) through NCCL, one
// NCCL communicator per process and GPU. A plain C++ header (no CUDA or NCCL types), like
// cuda_backend.h, so that code built without nvcc can include it.
//
// Contract beyond communicator.h:
// - rank() and world_size() are the host communicator's; rank r's GPU is the backend's.
// - Tensor collectives are enqueued on the backend's stream and return at once; they may be
//   recorded in a CUDA graph (Backend::capture_graph). all_reduce_sum takes BF16 or F32;
//   all_gather_columns any dtype. All-reduces of at most PeerAllReduce::kCapacity bytes
//   (16-byte multiples: the decode steps') go through the one-shot kernel over peer-mapped
//   memory of collectives/peer_all_reduce.h where every rank's GPU can map every other's
//   (KESTREL_CUSTOM_ALLREDUCE=0 turns it off); larger ones, and all others, through NCCL.
//   all_reduce_add (BF16) adds the sum into the residual in that kernel, else runs NCCL's
//   all-reduce and the backend's add kernel.
// - all_gather_columns gathers through a device scratch [world_size, R, C] that grows (new
//   address) only when a call needs more, so a warm-up call before CUDA graph capture fixes
//   its address: run each captured shape once before capturing, as the backend's attention
//   already requires. A call that would grow it during a capture throws. Scratch buffers
//   replaced by larger ones are kept, since a captured graph may still use them.
// - Host operations (broadcast_host, all_reduce_min_host, barrier) forward to the host
//   communicator.
// - Errors: a failed NCCL or CUDA call throws kestrel::Error naming the call, file, line and
//   rank. A watchdog thread polls NCCL for asynchronous errors (a peer that died, a network
//   failure) every 50 ms; on one it records "tensor-parallel rank R: NCCL async error: ..."
//   and aborts the NCCL communicator, so kernels spinning on a dead peer return. abort(why)
//   does the same from any thread, and also aborts the host communicator. From then on every
//   call throws the recorded error; graphs that recorded its collectives must not be
//   replayed again.
// - Destruction is collective when the peer all-reduce is in use: each rank waits at a host
//   barrier for the others before freeing the memory they read (skipped once broken).
//   ncclCommAbort runs on a thread of its own that nobody waits for, since it can block for
//   good when a peer process died.
// - Thread safety: as communicator.h; the calling thread's current CUDA device must be the
//   backend's (the backend's own rule).
#pragma once

#include <memory>

#include "backend/backend.h"
#include "parallel/communicator.h"

namespace kestrel {

// True when this build was linked with NCCL; otherwise make_nccl_communicator() throws.
bool nccl_available();

// The NCCL communicator of this process in the group that `host` spans: rank 0 makes NCCL's
// unique id, `host` broadcasts it, and every rank joins on `cuda_backend`'s GPU. A collective
// call: every rank of the group calls it at the same time, and it returns once all have
// joined. REQUIRES: `cuda_backend` came from make_cuda_backend(); `cuda_backend` and `host`
// outlive the result. Throws kestrel::Error for another backend, when NCCL fails to start,
// and in a build without NCCL.
std::unique_ptr<Communicator> make_nccl_communicator(Backend& cuda_backend, Communicator& host);

}  // namespace kestrel
