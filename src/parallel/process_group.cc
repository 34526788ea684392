// ProcessGroup over gloo's TCP transport: a FileStore rendezvous, then a full mesh.
#include "parallel/process_group.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "core/error.h"

namespace kestrel {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string this_host_name() {
  char name[256] = {};
  KS_CHECK(gethostname(name, sizeof(name) - 1) == 0, "gethostname failed: {}",
           std::strerror(errno));
  return name;
}

// A write to a socket whose peer died raises SIGPIPE, which kills the process by default;
// a dead peer must be an error instead. A disposition someone else chose is kept.
void ignore_sigpipe() {
  struct sigaction old = {};
  if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
}

// Our own arrival marker per rank, beside gloo's keys (whose file names are hashes): it lets
// a join timeout name the ranks that never came, and O_EXCL refuses a reused directory.
std::string marker_path(const std::string& dir, int rank) {
  return dir + "/kestrel-rank-" + std::to_string(rank);
}

void publish_arrival(const RankInfo& self) {
  const std::string path = marker_path(self.rendezvous_dir, self.rank);
  const int fd = open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
  if (fd < 0 && errno == EEXIST) {
    throw_error(
        "tensor-parallel rank {}: {} already exists: another process joined as rank {}, or "
        "the rendezvous directory {} was used by an earlier group (each group needs a fresh "
        "one)",
        self.rank, path, self.rank, self.rendezvous_dir);
  }
  KS_CHECK(fd >= 0, "tensor-parallel rank {}: cannot create {} in the rendezvous directory: {}",
           self.rank, path, std::strerror(errno));
  const std::string pid = std::to_string(getpid()) + "\n";
  const bool ok = write(fd, pid.data(), pid.size()) == static_cast<ssize_t>(pid.size());
  close(fd);
  KS_CHECK(ok, "tensor-parallel rank {}: cannot write {}", self.rank, path);
}

std::vector<int> missing_ranks(const RankInfo& self) {
  std::vector<int> missing;
  for (int r = 0; r < self.world_size; ++r) {
    if (access(marker_path(self.rendezvous_dir, r).c_str(), F_OK) != 0) missing.push_back(r);
  }
  return missing;
}

void wait_for_arrivals(const RankInfo& self, Clock::time_point deadline, milliseconds timeout) {
  for (;;) {
    const std::vector<int> missing = missing_ranks(self);
    if (missing.empty()) return;
    if (Clock::now() >= deadline) {
      throw_error(
          "tensor-parallel rank {}: rank{} {} of {} did not join within {} ms (rendezvous "
          "directory {})",
          self.rank, missing.size() == 1 ? "" : "s", fmt::join(missing, ", "), self.world_size,
          timeout.count(), self.rendezvous_dir);
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
}

class GlooProcessGroup final : public ProcessGroup {
 public:
  GlooProcessGroup(std::shared_ptr<gloo::transport::Device> device,
                   std::shared_ptr<gloo::rendezvous::Context> context, milliseconds op_timeout)
      : device_(std::move(device)), context_(std::move(context)), op_timeout_(op_timeout) {}

  int rank() const override { return context_->rank; }
  int world_size() const override { return context_->size; }

  void broadcast(void* data, size_t bytes, int root) override {
    KS_CHECK(root >= 0 && root < world_size(),
             "tensor-parallel rank {}: broadcast from rank {} of a group of {}", rank(), root,
             world_size());
    run("broadcast", bytes, [&](uint32_t tag) {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(static_cast<uint8_t*>(data), bytes);
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(op_timeout_);
      gloo::broadcast(opts);
    });
  }

  void all_reduce_sum(float* data, size_t count) override {
    run("all_reduce_sum", count * sizeof(float), [&](uint32_t tag) {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data, count);
      opts.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      opts.setTag(tag);
      opts.setTimeout(op_timeout_);
      gloo::allreduce(opts);
    });
  }

  void all_gather(const void* in, size_t bytes, void* out) override {
    // In place: gloo's own copy of the input would need a non-const pointer, and memmove
    // also covers an `in` that already lies inside `out`.
    auto* mine = static_cast<uint8_t*>(out) + static_cast<size_t>(rank()) * bytes;
    if (bytes > 0) std::memmove(mine, in, bytes);
    run("all_gather", bytes, [&](uint32_t tag) {
      gloo::AllgatherOptions opts(context_);
      opts.setOutput(static_cast<uint8_t*>(out), bytes * static_cast<size_t>(world_size()));
      opts.setTag(tag);
      opts.setTimeout(op_timeout_);
      gloo::allgather(opts);
    });
  }

  int64_t all_reduce_min(int64_t value) override {
    run("all_reduce_min", sizeof(value), [&](uint32_t tag) {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(&value, 1);
      opts.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::min<int64_t>));
      opts.setTag(tag);
      opts.setTimeout(op_timeout_);
      gloo::allreduce(opts);
    });
    return value;
  }

  void barrier() override {
    run("barrier", 1, [&](uint32_t tag) {
      gloo::BarrierOptions opts(context_);
      opts.setTag(tag);
      opts.setTimeout(op_timeout_);
      gloo::barrier(opts);
    });
  }

  void abort(const std::string& why) override {
    break_group(fmt::format("tensor-parallel rank {}: aborted: {}", rank(), why));
    // Closing under an operation in flight would race gloo's own use of the pairs; that
    // operation's thread closes them when it returns (run()).
    std::unique_lock op(op_mutex_, std::try_to_lock);
    if (op.owns_lock()) context_->closeConnections();
  }

 private:
  // Runs one collective under the broken-group rules. `bytes` == 0 is a no-op on every rank
  // alike (gloo rejects empty buffers), so it needs no network.
  template <typename Fn>
  void run(const char* what, size_t bytes, Fn&& fn) {
    std::lock_guard op(op_mutex_);
    throw_if_broken();
    if (bytes == 0) return;
    try {
      // A distinct tag per operation, the same sequence on every rank (they call the same
      // operations in the same order), so no two operations ever share a gloo slot.
      fn(next_tag_++);
    } catch (const gloo::IoException& e) {
      fail(
          fmt::format("tensor-parallel rank {}: {} of {} bytes failed (a peer rank exited, "
                      "or made no progress for {} ms): {}",
                      rank(), what, bytes, op_timeout_.count(), e.what()));
    } catch (const std::exception& e) {
      fail(fmt::format("tensor-parallel rank {}: {} of {} bytes failed: {}", rank(), what, bytes,
                       e.what()));
    }
    // abort() from another thread while this operation ran.
    if (!broken_message().empty()) {
      context_->closeConnections();
      throw_if_broken();
    }
  }

  [[noreturn]] void fail(const std::string& message) {
    break_group(message);
    // Peers blocked on this rank see the closed sockets and fail at once too.
    context_->closeConnections();
    throw_if_broken();
    throw Error(message);  // unreachable: throw_if_broken throws
  }

  void break_group(const std::string& message) {
    std::lock_guard lock(state_mutex_);
    if (broken_.empty()) broken_ = message;
  }

  std::string broken_message() const {
    std::lock_guard lock(state_mutex_);
    return broken_;
  }

  void throw_if_broken() const {
    std::string message = broken_message();
    if (!message.empty()) throw Error(message);
  }

  // Declared first so that the context (and its pairs) goes before the device's loop thread.
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  const milliseconds op_timeout_;
  uint32_t next_tag_ = 0;
  std::mutex op_mutex_;             // held while a collective runs
  mutable std::mutex state_mutex_;  // guards broken_
  std::string broken_;              // first failure's message; empty while healthy
};

}  // namespace

std::unique_ptr<ProcessGroup> ProcessGroup::connect(const RankInfo& self, milliseconds join_timeout,
                                                    milliseconds op_timeout) {
  KS_CHECK(self.world_size >= 1 && self.rank >= 0 && self.rank < self.world_size,
           "tensor-parallel rank {} of a group of {} is impossible", self.rank, self.world_size);
  KS_CHECK(join_timeout.count() > 0 && op_timeout.count() > 0,
           "tensor-parallel rank {}: timeouts must be positive (join {} ms, op {} ms)", self.rank,
           join_timeout.count(), op_timeout.count());
  std::error_code ec;
  KS_CHECK(!self.rendezvous_dir.empty() && std::filesystem::is_directory(self.rendezvous_dir, ec),
           "tensor-parallel rank {}: rendezvous directory '{}' does not exist", self.rank,
           self.rendezvous_dir);
  const Clock::time_point deadline = Clock::now() + join_timeout;
  ignore_sigpipe();

  const std::string host = self.host.empty() ? this_host_name() : self.host;
  std::shared_ptr<gloo::transport::Device> device;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = host;
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw_error("tensor-parallel rank {}: cannot listen for peers on host '{}': {}", self.rank,
                host, e.what());
  }

  publish_arrival(self);
  wait_for_arrivals(self, deadline, join_timeout);

  auto context = std::make_shared<gloo::rendezvous::Context>(self.rank, self.world_size);
  // Every rank has arrived: what is left of the join time (at least a second, for a rank
  // that arrived just in time) covers publishing addresses and connecting.
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
  context->setTimeout(std::max(left, milliseconds(1000)));
  try {
    gloo::rendezvous::FileStore store(self.rendezvous_dir);
    context->connectFullMesh(store, device);
  } catch (const std::exception& e) {
    throw_error(
        "tensor-parallel rank {}: connecting to the other {} ranks failed (host '{}', "
        "rendezvous directory {}): {}",
        self.rank, self.world_size - 1, host, self.rendezvous_dir, e.what());
  }
  context->setTimeout(op_timeout);
  return std::make_unique<GlooProcessGroup>(std::move(device), std::move(context), op_timeout);
}

}  // namespace kestrel
