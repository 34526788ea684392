// Host operations for ranks that are threads of one process: tests and benchmarks that run
// one rank per GPU in a single process, with NCCL (make_nccl_communicator) for the tensor
// collectives and this for the host side (NCCL's unique id, the peer all-reduce's handshake,
// barriers). Header-only: it needs nothing but the standard library.
//
// Usage: one ThreadGroup shared by the ranks' threads, one ThreadCommunicator per thread. A
// rank that fails calls abort_all(); one that never arrives makes the others throw after 60 s
// instead of hanging.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.h"
#include "parallel/communicator.h"

namespace kestrel {

class ThreadGroup {
 public:
  explicit ThreadGroup(int size) : size_(size) {}
  int size() const { return size_; }

  void broadcast(int rank, void* data, size_t bytes, int root) {
    if (rank == root) {
      std::lock_guard lock(mu_);
      buffer_.assign(static_cast<char*>(data), static_cast<char*>(data) + bytes);
    }
    arrive();
    if (rank != root) std::memcpy(data, buffer_.data(), bytes);
    arrive();  // nobody overwrites buffer_ before everyone has read it
  }

  void arrive() {
    std::unique_lock lock(mu_);
    if (aborted_) throw_error("threads: another rank failed");
    const int gen = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else if (!cv_.wait_for(lock, std::chrono::seconds(60),
                             [&] { return generation_ != gen || aborted_; })) {
      throw_error("threads: a rank did not arrive within 60 s");
    } else if (generation_ == gen) {
      throw_error("threads: another rank failed");
    }
  }

  // A rank that failed: the others' waits (now and later) throw at once.
  void abort_all() {
    std::lock_guard lock(mu_);
    aborted_ = true;
    cv_.notify_all();
  }

 private:
  const int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  int generation_ = 0;
  bool aborted_ = false;
  std::vector<char> buffer_;
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(ThreadGroup& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return group_.size(); }
  std::string name() const override { return "threads"; }
  void all_reduce_sum(Tensor&) override { throw_error("threads: no tensor collectives"); }
  void all_gather_columns(const Tensor&, Tensor&) override {
    throw_error("threads: no tensor collectives");
  }
  void broadcast(Tensor&, int) override { throw_error("threads: no tensor collectives"); }
  void broadcast_host(void* data, size_t bytes, int root) override {
    group_.broadcast(rank_, data, bytes, root);
  }
  int64_t all_reduce_min_host(int64_t value) override {
    int64_t least = value;
    for (int r = 0; r < group_.size(); ++r) {
      int64_t v = value;
      broadcast_host(&v, sizeof(v), r);
      least = std::min(least, v);
    }
    return least;
  }
  void barrier() override { group_.arrive(); }

 private:
  ThreadGroup& group_;
  const int rank_;
};

}  // namespace kestrel
