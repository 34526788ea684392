// Communicator: the collectives tensor parallelism needs, a seam of its own beside the
// Backend (DESIGN.md). The model is handed one explicitly; nothing asks for its rank.
//
// Two kinds of operation:
// - Tensor collectives (all_reduce_sum, all_gather_columns) take tensors of the backend
//   the communicator was made for and run in that backend's stream order: on CUDA they are
//   enqueued and return at once, and may be recorded inside a CUDA graph; on the CPU they
//   complete before returning. Every rank must call the same collectives in the same order
//   with the same shapes and dtypes.
// - Host operations (broadcast_host, all_reduce_min_host, barrier) move small control data
//   between processes and block until done. They are not for the forward pass.
//
// Errors: a peer that died, a timeout or a library error throws kestrel::Error naming what
// failed (and the rank, where known). After an error or abort() the communicator is
// broken: every later call throws the same error. A group cannot heal; the caller ends.
//
// Thread safety: one thread at a time calls the collectives; abort() may be called from any
// thread (a watchdog) and makes blocked or later calls fail.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "core/tensor.h"

namespace kestrel {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // "local", "gloo", "nccl": for logs and errors.
  virtual std::string name() const = 0;

  // t = sum over ranks of t, in place. Any shape; F32 on the CPU, BF16 or F32 on CUDA.
  virtual void all_reduce_sum(Tensor& t) = 0;
  // all_reduce_sum(t), then residual += t, t rounded to its dtype before the add (as
  // Backend::add_rms_norm's add): the residual add of a row-parallel product, in one
  // operation where the communicator can fuse it (the peer all-reduce on CUDA does it in the
  // same kernel). t and residual: the same shape and dtype (the forward's, F32 on the CPU,
  // BF16 on CUDA); every rank's residual holds the same values before and after. Only where
  // has_all_reduce_add(); the model composes all_reduce_sum and add_rms_norm elsewhere.
  virtual bool has_all_reduce_add() const { return false; }
  virtual void all_reduce_add(Tensor& t, Tensor& residual) {
    throw_error("{} communicator: no all_reduce_add", name());
  }
  // The vocab-parallel gather of the LM head. in [R, C] on every rank; out [R, W] with
  // (world_size - 1) * C < W <= world_size * C. On every rank, out[:, r*C + j] = rank r's
  // in[:, j] for the columns that exist (the last rank's trailing C*N - W columns are
  // dropped: padding of a vocabulary that N does not divide). Same dtype.
  virtual void all_gather_columns(const Tensor& in, Tensor& out) = 0;

  // t on rank `root` to t on every rank, in place, in stream order (rank 0's sampled tokens to
  // the other ranks' token-feedback buffers). Any dtype; the same shape on every rank.
  virtual void broadcast(Tensor& t, int root) = 0;

  // Host memory: copies `bytes` bytes at `data` on rank `root` to `data` on every rank.
  virtual void broadcast_host(void* data, size_t bytes, int root) = 0;
  // The smallest `value` over all ranks, on every rank.
  virtual int64_t all_reduce_min_host(int64_t value) = 0;
  // Returns once every rank has called it.
  virtual void barrier() = 0;

  // Makes every collective blocked now or called later fail with an Error carrying `why`
  // (NCCL: ncclCommAbort, so kernels spinning on a dead peer return). Idempotent.
  virtual void abort(const std::string& why) {}
};

// World size 1 without any library: collectives are identities. all_gather_columns needs
// in == out (same data), which is the only layout of one rank.
class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string name() const override { return "local"; }
  void all_reduce_sum(Tensor&) override {}
  void broadcast(Tensor&, int root) override {
    KS_CHECK(root == 0, "local communicator: broadcast from rank {} of 1", root);
  }
  void all_gather_columns(const Tensor& in, Tensor& out) override {
    KS_CHECK(in.data() == out.data() && in.shape() == out.shape(),
             "local communicator: all_gather_columns of one rank needs out to be in itself");
  }
  void broadcast_host(void*, size_t, int root) override {
    KS_CHECK(root == 0, "local communicator: broadcast from rank {} of 1", root);
  }
  int64_t all_reduce_min_host(int64_t value) override { return value; }
  void barrier() override {}
};

}  // namespace kestrel
