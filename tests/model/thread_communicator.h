// Test fake of the Communicator (parallel/communicator.h): N ranks as threads of one
// process, each with its own CpuBackend, sharing a ThreadGroup. The collectives meet at a
// barrier, read every rank's tensor through pointers posted there, and meet again before
// anyone may change its input. all_reduce_sum adds the ranks in order 0 .. N-1 on every
// rank, so every rank gets bit-identical sums (as NCCL's ring does not promise, but the
// tests want to compare ranks exactly).
//
// A rank that fails should call abort() (run_ranks does): the ranks blocked in a
// collective then throw instead of waiting for it forever.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "parallel/communicator.h"

namespace kestrel::test {

// What the ranks of one group share: a reusable barrier that can be broken, and one slot
// per rank to post a pointer (or a value) in.
class ThreadGroup {
 public:
  explicit ThreadGroup(int size) : size_(size), slots_(size) {}
  int size() const { return size_; }

  // Returns once all ranks have called it; throws the abort reason once broken.
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mu_);
    if (!why_.empty()) throw Error(why_);
    const uint64_t generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != generation || !why_.empty(); });
    if (generation_ == generation) throw Error(why_);
  }

  void abort(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (why_.empty()) why_ = why.empty() ? "thread group aborted" : why;
    cv_.notify_all();
  }

  struct Slot {
    const void* data = nullptr;
    Shape shape;
    int64_t value = 0;
  };
  // Written by its own rank before a barrier, read by all after it.
  Slot& slot(int rank) { return slots_[rank]; }

 private:
  const int size_;
  std::vector<Slot> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::string why_;
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadGroup> group, int rank)
      : group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int world_size() const override { return group_->size(); }
  std::string name() const override { return "threads"; }

  void all_reduce_sum(Tensor& t) override {
    KS_CHECK(t.dtype() == DType::kF32 && t.device() == Device::kCpu,
             "thread communicator: all_reduce_sum of F32 host tensors only");
    post(t.data(), t.shape());
    const int64_t n = t.numel();
    sum_.assign(static_cast<size_t>(n), 0.0f);
    for (int r = 0; r < world_size(); ++r) {
      const ThreadGroup::Slot& s = group_->slot(r);
      KS_CHECK(s.shape == t.shape(), "thread communicator: rank {} all-reduces {}, rank {} {}", r,
               s.shape.str(), rank_, t.shape().str());
      const float* p = static_cast<const float*>(s.data);
      for (int64_t i = 0; i < n; ++i) sum_[i] = r == 0 ? p[i] : sum_[i] + p[i];
    }
    group_->arrive_and_wait();  // every rank has read every input
    std::copy(sum_.begin(), sum_.end(), t.data_as<float>());
  }

  void all_gather_columns(const Tensor& in, Tensor& out) override {
    const int N = world_size();
    KS_CHECK(in.ndim() == 2 && out.ndim() == 2 && in.dtype() == out.dtype() &&
                 in.dim(0) == out.dim(0) && (N - 1) * in.dim(1) < out.dim(1) &&
                 out.dim(1) <= N * in.dim(1),
             "thread communicator: all_gather_columns of {} into {} over {} ranks",
             in.shape().str(), out.shape().str(), N);
    KS_CHECK(N == 1 || in.data() != out.data(),
             "thread communicator: all_gather_columns in place needs one rank");
    post(in.data(), in.shape());
    const int64_t R = in.dim(0), C = in.dim(1), W = out.dim(1);
    const size_t elem = dtype_size(in.dtype());
    char* dst = static_cast<char*>(out.data());
    for (int r = 0; r < N; ++r) {
      const ThreadGroup::Slot& s = group_->slot(r);
      KS_CHECK(s.shape == in.shape(), "thread communicator: rank {} gathers {}, rank {} {}", r,
               s.shape.str(), rank_, in.shape().str());
      const int64_t cols = std::min(C, W - r * C);
      const char* src = static_cast<const char*>(s.data);
      for (int64_t row = 0; row < R; ++row) {
        // memmove: with one rank `in` is `out`.
        std::memmove(dst + (row * W + r * C) * elem, src + row * C * elem, cols * elem);
      }
    }
    group_->arrive_and_wait();
  }

  void broadcast(Tensor& t, int root) override { broadcast_host(t.data(), t.nbytes(), root); }

  void broadcast_host(void* data, size_t bytes, int root) override {
    KS_CHECK(root >= 0 && root < world_size(), "thread communicator: broadcast from rank {}", root);
    post(data, Shape{static_cast<int64_t>(bytes)});
    if (rank_ != root) std::memcpy(data, group_->slot(root).data, bytes);
    group_->arrive_and_wait();
  }

  int64_t all_reduce_min_host(int64_t value) override {
    group_->slot(rank_).value = value;
    group_->arrive_and_wait();
    int64_t m = value;
    for (int r = 0; r < world_size(); ++r) m = std::min(m, group_->slot(r).value);
    group_->arrive_and_wait();
    return m;
  }

  void barrier() override { group_->arrive_and_wait(); }
  void abort(const std::string& why) override { group_->abort(why); }

 private:
  void post(const void* data, const Shape& shape) {
    ThreadGroup::Slot& s = group_->slot(rank_);
    s.data = data;
    s.shape = shape;
    group_->arrive_and_wait();
  }

  std::shared_ptr<ThreadGroup> group_;
  int rank_;
  std::vector<float> sum_;
};

// Runs fn(comm) on `world_size` threads, one rank each, and waits for them. The first
// exception a rank throws aborts the group (so no peer waits forever) and is rethrown here.
inline void run_ranks(int world_size, const std::function<void(ThreadCommunicator&)>& fn) {
  auto group = std::make_shared<ThreadGroup>(world_size);
  std::mutex mu;
  std::exception_ptr first;  // the failure itself, not a peer's "aborted" that follows it
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      ThreadCommunicator comm(group, r);
      try {
        fn(comm);
      } catch (const std::exception& e) {
        {
          std::lock_guard<std::mutex> lock(mu);
          if (!first) first = std::current_exception();
        }
        comm.abort("rank " + std::to_string(r) + " failed: " + e.what());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace kestrel::test
