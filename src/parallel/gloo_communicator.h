// GlooCommunicator: the Communicator of CPU-backend tensor parallelism, over a host
// ProcessGroup (gloo). Tensor collectives take host (Device::kCpu) F32 tensors and complete
// before returning; other devices or dtypes are refused with an Error. Host operations and
// abort() forward to the group, so the group and every communicator on it break together.
//
// Lifetime: the communicator borrows the group; the group must outlive it.
// Thread safety: as ProcessGroup (one caller at a time; abort() from any thread).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/process_group.h"

namespace kestrel {

class GlooCommunicator final : public Communicator {
 public:
  explicit GlooCommunicator(ProcessGroup& group) : group_(group) {}

  int rank() const override { return group_.rank(); }
  int world_size() const override { return group_.world_size(); }
  std::string name() const override { return "gloo"; }

  // t: F32 on the CPU, any shape.
  void all_reduce_sum(Tensor& t) override;
  bool has_all_reduce_add() const override { return true; }
  void all_reduce_add(Tensor& t, Tensor& residual) override;
  // in [R, C], out [R, W]: F32 on the CPU, (world_size - 1) * C < W <= world_size * C.
  void all_gather_columns(const Tensor& in, Tensor& out) override;
  // t: any dtype on the CPU.
  void broadcast(Tensor& t, int root) override;

  void broadcast_host(void* data, size_t bytes, int root) override {
    group_.broadcast(data, bytes, root);
  }
  int64_t all_reduce_min_host(int64_t value) override { return group_.all_reduce_min(value); }
  void barrier() override { group_.barrier(); }
  void abort(const std::string& why) override { group_.abort(why); }

 private:
  ProcessGroup& group_;
  std::vector<float> gathered_;  // [world_size, R, C]: every rank's `in`, reused
};

// A GlooCommunicator on `group` (which must outlive it).
std::unique_ptr<Communicator> make_gloo_communicator(ProcessGroup& group);

}  // namespace kestrel
