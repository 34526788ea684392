#include "runtime/tp_executor.h"

#include <chrono>
#include <cstdlib>

#include "core/error.h"
#if KESTREL_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#endif
#include "core/logging.h"
#include "io/model_config.h"
#include "model/shard_plan.h"
#include "parallel/communicator.h"
#include "parallel/local_workers.h"
#include "runtime/tp_protocol.h"
#include "runtime/tp_worker.h"

namespace kestrel {
namespace {

// On one host rank r runs on GPU r: asking for more ranks than GPUs fails before any starts.
void check_local_devices(const std::string& device, int n) {
#if KESTREL_WITH_CUDA
  const int gpus = cuda_device_count();
  if (device == "cuda" || (device == "auto" && gpus > 0)) {
    KS_CHECK(gpus >= n,
             "tensor_parallel_size {} needs {} GPUs on this host, and {} {} visible{}", n, n,
             gpus, gpus == 1 ? "is" : "are",
             std::getenv("CUDA_VISIBLE_DEVICES")
                 ? fmt::format(" (CUDA_VISIBLE_DEVICES={})", std::getenv("CUDA_VISIBLE_DEVICES"))
                 : std::string());
  }
#endif
}

}  // namespace

TensorParallelExecutor::TensorParallelExecutor(const std::string& model_dir,
                                               const EngineConfig& config,
                                               const std::optional<RankInfo>& role) {
  const int n = config.tensor_parallel_size;
  // n == 1: a group of rank 0 alone, so that one device runs every part of this path
  // (KESTREL_TP_ALWAYS=1; llm.cc).
  KS_CHECK(n >= 1, "a tensor-parallel executor needs tensor_parallel_size >= 1, got {}", n);
  // Before any process starts: a model that cannot be split this way fails here, clearly.
  ShardPlan::make(load_model_config(model_dir), 0, n);
  RankInfo self;
  if (role) {
    KS_CHECK(role->rank == 0 && role->world_size == n,
             "the tensor-parallel executor runs on rank 0 of {} (this is rank {} of {})", n,
             role->rank, role->world_size);
    self = *role;
  } else {
    check_local_devices(config.device, n);
    workers_ = std::make_unique<LocalWorkers>(n, config.tp_worker_command);
    self = workers_->rank0();
    watchdog_ = std::thread([this] { watch_workers(); });
  }
  try {
    group_ = ProcessGroup::connect(self, kTpJoinTimeout, kTpOpTimeout);
    broadcast_startup(*group_, StartupMessage{model_dir, config});
    const TensorParallelRank tp{group_.get(), self.local_rank};
    runner_ = std::make_unique<ModelRunner>(model_dir, config, &tp);
  } catch (const Error& e) {
    // A worker that failed first (a bad shard, no such GPU) is the cause worth naming.
    const std::string dead = dead_worker(2000);
    throw Error("tensor parallelism could not start: " +
                (dead.empty() ? std::string(e.what()) : dead + " (rank 0: " + e.what() + ")"));
  }
  abort_target_ = runner_->communicator();
  runner_->set_step_broadcast(this);
  KS_LOG_INFO("tensor parallelism: {} ranks ({}), model shards loaded", n,
              workers_ ? "started on this host" : "from a launcher");
}

TensorParallelExecutor::~TensorParallelExecutor() {
  if (failure().empty()) {
    try {
      StepHeader h;
      h.kind = StepKind::kShutdown;
      send_header(*group_, h);
      runner_->backend().synchronize();
    } catch (const std::exception& e) {
      KS_LOG_WARN("tensor parallelism: shutdown: {}", e.what());
    }
  }
  stop_watchdog();
  // The runner's communicators close before the workers are reaped (LocalWorkers kills any
  // that linger).
  abort_target_ = nullptr;
  runner_.reset();
  group_.reset();
  if (workers_) workers_->wait_exit(10'000);
}

template <typename F>
auto TensorParallelExecutor::guarded(F&& f) {
  if (!failure_.empty()) throw Error(failure_);
  // A worker known dead: its collectives were aborted, and a CUDA graph replayed now would
  // run them against the aborted communicator. Fail before enqueuing anything.
  if (const std::string dead = dead_worker(0); !dead.empty()) fail(dead);
  try {
    return f();
  } catch (const Error& e) {
    fail(e.what());
  }
}

void TensorParallelExecutor::fail(const std::string& what) {
  const std::string dead = dead_worker(1000);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failure_ = "tensor-parallel group failed: " +
               (dead.empty() || dead == what ? what : dead + " (rank 0: " + what + ")");
  }
  if (Communicator* comm = abort_target_.load()) comm->abort(failure_);
  // Closes rank 0's connections: workers waiting for the next step fail and exit now.
  group_->abort(failure_);
  KS_LOG_ERROR("{}", failure_);
  throw Error(failure_);
}

std::string TensorParallelExecutor::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failure_.empty()) return failure_;
  return dead_worker_.empty() ? std::string() : "tensor-parallel group failed: " + dead_worker_;
}

std::string TensorParallelExecutor::dead_worker(int ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (workers_ && !stop_) {
    wake_.wait_for(lock, std::chrono::milliseconds(ms), [&] { return !dead_worker_.empty(); });
  }
  return dead_worker_;
}

std::vector<SampledToken> TensorParallelExecutor::execute(const ScheduledBatch& batch) {
  return guarded([&] { return runner_->execute(batch); });
}

void TensorParallelExecutor::launch(const ScheduledBatch& batch) {
  guarded([&] { runner_->launch(batch); });
}

void TensorParallelExecutor::launch_forward(const ScheduledBatch& batch) {
  guarded([&] { runner_->launch_forward(batch); });
}

void TensorParallelExecutor::launch_sampling(const ScheduledBatch& batch) {
  guarded([&] { runner_->launch_sampling(batch); });
}

std::vector<SampledToken> TensorParallelExecutor::collect() {
  return guarded([&] { return runner_->collect(); });
}

void TensorParallelExecutor::discard() {
  if (!failure_.empty()) return;  // the group is gone; nothing of it to wait for
  guarded([&] { runner_->discard(); });
}

void TensorParallelExecutor::forward(const HostBatch& batch) { send_forward(*group_, batch); }

void TensorParallelExecutor::time_decode(int batch, int context_len, int iters) {
  StepHeader h;
  h.kind = StepKind::kTimeDecode;
  h.args[0] = batch;
  h.args[1] = context_len;
  h.args[2] = iters;
  send_header(*group_, h);
}

void TensorParallelExecutor::kv_clamped() {
  StepHeader h;
  h.kind = StepKind::kKvClamped;
  send_header(*group_, h);
}

void TensorParallelExecutor::watch_workers() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::milliseconds(100));
    if (stop_) return;
    std::string dead = workers_->dead_worker();
    if (dead.empty()) continue;
    dead_worker_ = dead;
    wake_.notify_all();
    // Collectives waiting on the dead rank (NCCL kernels spin) return with this error.
    if (Communicator* comm = abort_target_.load()) comm->abort("tensor-parallel group failed: " + dead);
    return;
  }
}

void TensorParallelExecutor::stop_watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

}  // namespace kestrel
