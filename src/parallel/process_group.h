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
// (never a hang); `timeout` bounds every operation otherwise.
//
// Thread safety: one thread at a time.
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
  // never published an address) or the directory cannot be used. Later operations fail
  // after `op_timeout` without progress (a live but stuck peer); a dead peer fails them at
  // once.
  static std::unique_ptr<ProcessGroup> connect(const RankInfo& self,
                                               std::chrono::milliseconds join_timeout,
                                               std::chrono::milliseconds op_timeout);

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // Copies `bytes` bytes at `data` on rank `root` to `data` on every rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // Sums `count` floats at `data` over all ranks, in place, on every rank.
  virtual void all_reduce_sum(float* data, size_t count) = 0;
  // out [world_size * bytes]: rank r's `bytes` bytes of `in` at out + r * bytes.
  virtual void all_gather(const void* in, size_t bytes, void* out) = 0;
  virtual int64_t all_reduce_min(int64_t value) = 0;
  virtual void barrier() = 0;
};

}  // namespace kestrel
