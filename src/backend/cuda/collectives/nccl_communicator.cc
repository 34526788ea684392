// NcclCommunicator (nccl_communicator.h). Built with NCCL when CMake found it
// (KESTREL_WITH_NCCL), else a factory that explains what is missing.
#include "backend/cuda/collectives/nccl_communicator.h"

#include "core/error.h"

#if KESTREL_WITH_NCCL

#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/collectives/peer_all_reduce.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "core/logging.h"

namespace kestrel {
namespace {

[[noreturn]] void nccl_fail(ncclResult_t result, const char* op, const char* file, int line) {
  // ncclGetLastError ignores its argument today; it holds the detail behind the code
  // ("connection closed by peer", the failing system call).
  const char* detail = ncclGetLastError(nullptr);
  throw_error("NCCL error in {} at {}:{}: {}{}{}", op, file, line, ncclGetErrorString(result),
              detail != nullptr && *detail != '\0' ? ": " : "", detail != nullptr ? detail : "");
}

// Every NCCL call goes through this, so a failure names the call, file and line.
#define KS_NCCL_CHECK(expr)                                                               \
  do {                                                                                    \
    ncclResult_t ks_res_ = (expr);                                                        \
    if (ks_res_ != ncclSuccess) ::kestrel::nccl_fail(ks_res_, #expr, __FILE__, __LINE__); \
  } while (0)

constexpr auto kWatchdogPeriod = std::chrono::milliseconds(50);
// How long an abort waits for an enqueue in flight before aborting under it (see fail()).
constexpr auto kAbortWait = std::chrono::milliseconds(500);
// How often a call waiting for the communicator's lock looks whether it broke meanwhile.
constexpr auto kLockPoll = std::chrono::milliseconds(10);

// The NCCL communicator and the lock around it, shared with the thread that aborts it.
// ncclCommAbort can block for good when a peer process on the same node died (it waits for
// every local rank to abort; seen on two H100s, and NVIDIA/nccl#863), so the abort runs on a
// detached thread that owns a reference to this, and no caller ever waits for it: NCCL sets
// its abort flag first, so kernels spinning on the dead peer still return.
struct CommHandle {
  ncclComm_t comm = nullptr;
  // Shared by calls that use comm (enqueues, the watchdog's poll); exclusive for the abort
  // that frees it.
  std::shared_timed_mutex mu;
};

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(CudaBackend& backend, Communicator& host);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string name() const override { return "nccl"; }

  void all_reduce_sum(Tensor& t) override;
  bool has_all_reduce_add() const override { return true; }
  void all_reduce_add(Tensor& t, Tensor& residual) override;
  void all_gather_columns(const Tensor& in, Tensor& out) override;
  void broadcast(Tensor& t, int root) override;

  void broadcast_host(void* data, size_t bytes, int root) override;
  int64_t all_reduce_min_host(int64_t value) override;
  void barrier() override;

  void abort(const std::string& why) override {
    fail(fmt::format("tensor-parallel rank {}: {}", rank_, why));
  }

 private:
  // Runs `enqueue` (NCCL/CUDA calls on comm_) unless the communicator is broken; a failure
  // breaks it, since the ranks are now out of step.
  template <typename F>
  void guarded(F&& enqueue);
  void throw_if_broken() const;
  // Records `message` as the error (the first one wins) and aborts NCCL and the host.
  void fail(const std::string& message);
  void watch();
  // The gather scratch, at least `bytes`; see the header on graph capture.
  void* gather_scratch(size_t bytes);

  CudaBackend& backend_;
  Communicator& host_;
  const cudaStream_t stream_;
  const int device_;
  const int rank_;
  const int world_size_;
  const std::shared_ptr<CommHandle> handle_ = std::make_shared<CommHandle>();
  ncclComm_t& comm_ = handle_->comm;

  mutable std::mutex state_mu_;
  std::atomic<bool> broken_{false};
  std::string error_;  // guarded by state_mu_; set once, with broken_
  bool stop_ = false;  // guarded by state_mu_
  std::condition_variable stop_cv_;

  // Small all-reduces (decode steps) over peer-mapped memory; null where the GPUs cannot
  // map each other's memory (then NCCL does every all-reduce).
  std::unique_ptr<PeerAllReduce> peer_;
  // KESTREL_BENCH_SKIP_ALL_REDUCE=1: all-reduces do nothing (all_reduce_add only adds this
  // rank's part), so that a benchmark can subtract the compute alone from a step's time;
  // 2: the logits' all_gather_columns too. The tokens are wrong; never for serving.
  bool skip_all_reduce_ = false;
  bool skip_gather_ = false;
  Tensor scratch_;
  std::vector<Tensor> retired_scratch_;
  std::thread watchdog_;
};

NcclCommunicator::NcclCommunicator(CudaBackend& backend, Communicator& host)
    : backend_(backend),
      host_(host),
      stream_(backend.stream()),
      device_(backend.device_index()),
      rank_(host.rank()),
      world_size_(host.world_size()) {
  try {
    KS_CUDA_CHECK(cudaSetDevice(device_));  // NCCL joins on the current device
    int version = 0;
    KS_NCCL_CHECK(ncclGetVersion(&version));
    KS_LOG_INFO("NCCL {}: rank {} of {} joining on cuda:{}", version, rank_, world_size_, device_);
    ncclUniqueId id{};
    if (rank_ == 0) KS_NCCL_CHECK(ncclGetUniqueId(&id));
    host_.broadcast_host(&id, sizeof(id), 0);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 1;
    config.commName = "kestrel-tp";
    const ncclResult_t res = ncclCommInitRankConfig(&comm_, world_size_, id, rank_, &config);
    if (res != ncclSuccess && comm_ != nullptr) ncclCommAbort(comm_);
    KS_NCCL_CHECK(res);
    peer_ = PeerAllReduce::create(device_, host_);
    const int64_t skip = agreed_env(host_, "KESTREL_BENCH_SKIP_ALL_REDUCE", 0, 0, 2);
    skip_all_reduce_ = skip != 0;
    skip_gather_ = skip == 2;
    if (skip_all_reduce_) {
      KS_LOG_WARN("KESTREL_BENCH_SKIP_ALL_REDUCE={}: all-reduces{} skipped, outputs are wrong",
                  skip, skip_gather_ ? " and the logits' gather" : "");
    }
  } catch (const Error& e) {
    throw_error("tensor-parallel rank {}: {}", rank_, e.what());
  }
  watchdog_ = std::thread([this] { watch(); });
}

NcclCommunicator::~NcclCommunicator() {
  {
    std::lock_guard lock(state_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  watchdog_.join();
  if (peer_ && !broken_) {
    // Peers may still read this rank's buffer in their last all-reduce: free it only once
    // every rank is here. A failure means the group is gone, and nobody reads it any more.
    try {
      backend_.synchronize();
      host_.barrier();
    } catch (const std::exception&) {
    }
  }
  peer_.reset();
  // Results ignored: a destructor has no one to tell. A broken communicator was aborted,
  // which freed it already.
  if (!broken_) ncclCommDestroy(comm_);
}

void NcclCommunicator::throw_if_broken() const {
  if (!broken_) return;
  std::lock_guard lock(state_mu_);
  throw Error(error_);
}

template <typename F>
void NcclCommunicator::guarded(F&& enqueue) {
  // Never blocks behind an abort: that holds the lock for as long as NCCL takes.
  std::shared_lock lock(handle_->mu, std::defer_lock);
  while (!lock.try_lock_for(kLockPoll)) throw_if_broken();
  throw_if_broken();
  try {
    enqueue();
  } catch (const Error& e) {
    lock.unlock();
    fail(fmt::format("tensor-parallel rank {}: {}", rank_, e.what()));
    throw_if_broken();  // the recorded error: an abort that raced this call may have won
    throw;
  }
}

void NcclCommunicator::fail(const std::string& message) {
  {
    std::lock_guard lock(state_mu_);
    if (broken_) return;
    error_ = message;
    broken_ = true;
  }
  if (peer_) peer_->abort();
  std::thread([handle = handle_, device = device_] {
    cudaSetDevice(device);  // result ignored: NCCL sets the device itself where it must
    // An enqueue that holds the lock longer than kAbortWait is blocked inside NCCL on a dead
    // peer (lazy connection setup), and only the abort frees it: abort without the lock then.
    std::unique_lock lock(handle->mu, std::defer_lock);
    (void)lock.try_lock_for(kAbortWait);
    ncclCommAbort(handle->comm);  // result ignored: the communicator is unusable either way
  }).detach();
  host_.abort(message);
}

void NcclCommunicator::watch() {
  // NCCL may make CUDA calls on this thread while aborting. Result ignored: a thread has no
  // one to tell, and NCCL sets the device itself where it must.
  cudaSetDevice(device_);
  std::unique_lock stop_lock(state_mu_);
  while (!stop_cv_.wait_for(stop_lock, kWatchdogPeriod, [this] { return stop_; })) {
    if (broken_) return;
    stop_lock.unlock();
    ncclResult_t async = ncclSuccess;
    ncclResult_t res;
    {
      std::shared_lock lock(handle_->mu, std::defer_lock);
      if (!lock.try_lock_for(kWatchdogPeriod) || broken_) return;  // comm_ may be freed
      res = ncclCommGetAsyncError(comm_, &async);
    }
    if (res == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
      const char* detail = ncclGetLastError(nullptr);
      fail(fmt::format("tensor-parallel rank {}: NCCL async error: {}{}{}", rank_,
                       ncclGetErrorString(async), detail && *detail ? ": " : "",
                       detail ? detail : ""));
      return;
    }
    if (res != ncclSuccess) {
      fail(fmt::format("tensor-parallel rank {}: NCCL error in ncclCommGetAsyncError: {}", rank_,
                       ncclGetErrorString(res)));
      return;
    }
    stop_lock.lock();
  }
}

void NcclCommunicator::all_reduce_sum(Tensor& t) {
  KS_CHECK(t.defined() && t.device() == Device::kCuda,
           "nccl communicator: all_reduce_sum needs a CUDA tensor");
  KS_CHECK(t.dtype() == DType::kBF16 || t.dtype() == DType::kF32,
           "nccl communicator: all_reduce_sum takes BF16 or F32, not {}", dtype_name(t.dtype()));
  if (t.numel() == 0 || skip_all_reduce_) return;
  if (peer_ && peer_->takes(t.nbytes(), t.data())) {
    guarded([&] { peer_->run(t.data(), t.numel(), t.dtype(), stream_); });
    return;
  }
  const ncclDataType_t type = t.dtype() == DType::kBF16 ? ncclBfloat16 : ncclFloat32;
  guarded([&] {
    KS_NCCL_CHECK(ncclAllReduce(t.data(), t.data(), static_cast<size_t>(t.numel()), type, ncclSum,
                                comm_, stream_));
  });
}

void NcclCommunicator::all_reduce_add(Tensor& t, Tensor& residual) {
  KS_CHECK(t.defined() && residual.defined() && t.device() == Device::kCuda &&
               residual.device() == Device::kCuda,
           "nccl communicator: all_reduce_add needs CUDA tensors");
  KS_CHECK(t.dtype() == DType::kBF16 && residual.dtype() == DType::kBF16,
           "nccl communicator: all_reduce_add takes BF16, not {} into {}", dtype_name(t.dtype()),
           dtype_name(residual.dtype()));
  KS_CHECK(t.shape() == residual.shape(),
           "nccl communicator: all_reduce_add of {} into a residual of {}", t.shape().str(),
           residual.shape().str());
  if (t.numel() == 0) return;
  if (peer_ && !skip_all_reduce_ && peer_->takes(t.nbytes(), t.data()) &&
      peer_->takes(residual.nbytes(), residual.data())) {
    guarded([&] { peer_->run(t.data(), t.numel(), t.dtype(), stream_, residual.data()); });
    return;
  }
  all_reduce_sum(t);
  kernels::add_into(static_cast<kernels::bf16*>(residual.data()),
                    static_cast<const kernels::bf16*>(t.data()), t.numel(), stream_);
}

void NcclCommunicator::broadcast(Tensor& t, int root) {
  KS_CHECK(t.defined() && t.device() == Device::kCuda,
           "nccl communicator: broadcast needs a CUDA tensor");
  KS_CHECK(root >= 0 && root < world_size_, "nccl communicator: broadcast from rank {} of {}", root,
           world_size_);
  if (t.nbytes() == 0) return;
  guarded([&] {
    KS_NCCL_CHECK(ncclBroadcast(t.data(), t.data(), t.nbytes(), ncclChar, root, comm_, stream_));
  });
}

void NcclCommunicator::all_gather_columns(const Tensor& in, Tensor& out) {
  KS_CHECK(in.defined() && out.defined() && in.device() == Device::kCuda &&
               out.device() == Device::kCuda,
           "nccl communicator: all_gather_columns needs CUDA tensors");
  KS_CHECK(in.dtype() == out.dtype(), "nccl communicator: all_gather_columns of {} into {}",
           dtype_name(in.dtype()), dtype_name(out.dtype()));
  KS_CHECK(in.ndim() == 2 && out.ndim() == 2 && in.dim(0) == out.dim(0),
           "nccl communicator: all_gather_columns needs in [R, C] and out [R, W], got {} and {}",
           in.shape().str(), out.shape().str());
  const int64_t rows = in.dim(0), cols = in.dim(1), width = out.dim(1);
  KS_CHECK(cols > 0 && (world_size_ - 1) * cols < width && width <= world_size_ * cols,
           "nccl communicator: all_gather_columns of {} columns over {} ranks into {} columns",
           cols, world_size_, width);
  if (rows == 0 || skip_gather_) return;
  const size_t es = dtype_size(in.dtype());
  const size_t chunk = static_cast<size_t>(rows * cols) * es;  // one rank's part
  auto* out_bytes = static_cast<char*>(out.data());
  // One row and no padding: NCCL's layout [N, 1, C] is out's own, so gather in place (in
  // may be out's own chunk, which NCCL's in-place rule allows).
  const bool direct = rows == 1 && width == world_size_ * cols &&
                      (in.data() == out_bytes + rank_ * chunk ||
                       !overlaps(in.data(), chunk, out.data(), out.nbytes()));
  if (direct) {
    guarded([&] {
      KS_NCCL_CHECK(ncclAllGather(in.data(), out.data(), chunk, ncclChar, comm_, stream_));
    });
    return;
  }
  auto* scratch = static_cast<char*>(gather_scratch(chunk * world_size_));
  guarded([&] {
    KS_NCCL_CHECK(ncclAllGather(in.data(), scratch, chunk, ncclChar, comm_, stream_));
    // scratch [N, R, C] -> out [R, W]: rank r's block to columns [r*C, r*C + its width).
    for (int r = 0; r < world_size_; ++r) {
      const int64_t part = std::min(cols, width - r * cols);
      KS_CUDA_CHECK(cudaMemcpy2DAsync(out_bytes + r * cols * es, width * es, scratch + r * chunk,
                                      cols * es, part * es, rows, cudaMemcpyDeviceToDevice,
                                      stream_));
    }
  });
}

void* NcclCommunicator::gather_scratch(size_t bytes) {
  if (scratch_.defined() && scratch_.nbytes() >= bytes) return scratch_.data();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  KS_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capture));
  KS_CHECK(capture == cudaStreamCaptureStatusNone,
           "nccl communicator: all_gather_columns needs {} bytes of scratch during a CUDA graph "
           "capture; run each captured shape once before capturing",
           bytes);
  if (scratch_.defined()) retired_scratch_.push_back(scratch_);
  // Doubling bounds the number of retired buffers (and so the memory they keep).
  const size_t grown = scratch_.defined() ? std::max(bytes, 2 * scratch_.nbytes()) : bytes;
  scratch_ = backend_.empty(DType::kU8, Shape{static_cast<int64_t>(grown)});
  return scratch_.data();
}

void NcclCommunicator::broadcast_host(void* data, size_t bytes, int root) {
  throw_if_broken();
  host_.broadcast_host(data, bytes, root);
}

int64_t NcclCommunicator::all_reduce_min_host(int64_t value) {
  throw_if_broken();
  return host_.all_reduce_min_host(value);
}

void NcclCommunicator::barrier() {
  throw_if_broken();
  host_.barrier();
}

}  // namespace

bool nccl_available() { return true; }

std::unique_ptr<Communicator> make_nccl_communicator(Backend& cuda_backend, Communicator& host) {
  auto* cuda = dynamic_cast<CudaBackend*>(&cuda_backend);
  KS_CHECK(cuda != nullptr, "nccl communicator: needs a CUDA backend, got {}", cuda_backend.name());
  return std::make_unique<NcclCommunicator>(*cuda, host);
}

}  // namespace kestrel

#else  // !KESTREL_WITH_NCCL

namespace kestrel {

bool nccl_available() { return false; }

std::unique_ptr<Communicator> make_nccl_communicator(Backend&, Communicator&) {
  throw_error(
      "this build has no NCCL: tensor parallelism on CUDA needs it; set KESTREL_NCCL_ROOT to a "
      "folder with include/nccl.h and lib/libnccl.so* and rebuild");
}

}  // namespace kestrel

#endif  // KESTREL_WITH_NCCL
