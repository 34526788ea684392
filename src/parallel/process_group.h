// ProcessGroup: the host-side group of a tensor-parallel engine's processes, built on gloo
// (Debian libgloo-dev; docs/parallel.md says why gloo). It carries the control plane:
// rank 0's step descriptions, the engine config, NCCL's unique id, the KV block count
// agreement; and, through GlooCommunicator, the CPU backend's tensor collectives.
//
// Rendezvous: every rank opens the same directory (a gloo FileStore) and publishes its TCP
// address there; ranks then connect in a full mesh. On one host the directory is a fresh
// private one (LocalWorkers makes it), so two engines never meet. Across hosts it must be
// on a filesystem every host sees. TCP ports are ephemeral: no fixed port is ever used.
//
// A peer that exits closes its sockets, so a rank blocked on it gets an error at once
// (never a hang); `op_timeout` bounds every operation otherwise.
//
// Errors: every failure throws kestrel::Error naming "tensor-parallel rank R" and the
// operation. The first failure (or abort()) breaks the group for good: this rank closes
// its connections, so peers blocked on it fail at once too, and every later call throws
// the same error again without touching the network. A group cannot heal; the caller ends.
//
// Every rank must call the same operations in the same order with the same sizes (and
// root); a mismatch is undefined (a wrong result, a hang until op_timeout, or an error).
//
// The TCP transport writes to sockets a dead peer may have closed; connect() therefore
// sets SIGPIPE to ignored for the whole process when it is at its default (which would
// kill the process), so such a write fails with an error instead.
//
// Thread safety: one thread at a time calls the operations; abort() may be called from any
// thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kestrel {

// Where one process sits in a group, and how it finds the others.
struct RankInfo {
  int rank = 0;
  int world_size = 1;
  // Index of this rank among the ranks on its host: its GPU.
  int local_rank = 0;
  // The rendezvous directory every rank of the group opens.
  std::string rendezvous_dir;
  // Address other ranks reach this one at: "127.0.0.1" when all ranks share a host, else a
  // host name or address of this machine's (empty: this host's name).
  std::string host;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  // Joins the group `self` describes. Returns when all world_size ranks are connected;
  // throws kestrel::Error when they are not within `join_timeout` (naming the ranks that
  // never arrived and the directory) or the directory cannot be used. Later operations fail
  // after `op_timeout` without progress (a live but stuck peer); a dead peer fails them at
  // once.
  // REQUIRES: 0 <= self.rank < self.world_size; self.rendezvous_dir is an existing
  // directory that no earlier group has used (each rank leaves a file there, so a second
  // group in the same directory is refused with an error).
  static std::unique_ptr<ProcessGroup> connect(const RankInfo& self,
                                               std::chrono::milliseconds join_timeout,
                                               std::chrono::milliseconds op_timeout);

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // Copies `bytes` bytes at `data` on rank `root` to `data` on every rank. Here and below,
  // a size of 0 returns at once without the network (but still throws if broken).
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // Sums `count` floats at `data` over all ranks, in place, on every rank.
  virtual void all_reduce_sum(float* data, size_t count) = 0;
  // out [world_size * bytes]: rank r's `bytes` bytes of `in` at out + r * bytes. `in` may
  // be this rank's own place in `out`.
  virtual void all_gather(const void* in, size_t bytes, void* out) = 0;
  // The smallest `value` over all ranks, on every rank.
  virtual int64_t all_reduce_min(int64_t value) = 0;
  // Returns once every rank has called it.
  virtual void barrier() = 0;

  // Breaks the group with an Error carrying `why`: later calls throw it. When no operation
  // is in flight the connections close at once (peers blocked on this rank fail); an
  // operation in flight on another thread cannot be interrupted (the TCP transport has no
  // such call): it ends by itself (a dead peer, op_timeout), then throws and closes them.
  // Idempotent; the first reason stays.
  virtual void abort(const std::string& why) = 0;
};

}  // namespace kestrel
