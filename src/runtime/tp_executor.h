// TensorParallelExecutor: rank 0 of a tensor-parallel group, in front of the per-rank
// runners (docs/parallel.md). The engine drives it like any ModelExecutor; it drives rank
// 0's ModelRunner, which tells the other ranks each device step (tp_protocol.h) before it
// runs it and samples it (on GPUs with every rank, from each rank's vocab shard, where the
// rows allow it: ModelRunner::join_sampling). The other ranks run tp_worker.h's loop.
//
// Start-up: on one host (config.tp_rendezvous empty) it starts ranks 1..N-1 itself
// (LocalWorkers); under a launcher every process runs the same command and the group
// meets in config.tp_rendezvous. Then rank 0 sends the model directory and config, and
// all ranks load their shards together.
//
// Failure: a worker that exits (watched every 100 ms), a dead peer or a collective error
// fails the step in flight and every later one with an Error naming the rank, and ends the
// other workers; the group is not rebuilt. The destructor tells the workers to exit and
// waits for them.
//
// Steps overlap as on one device (async scheduling): pending tokens reach the other ranks
// through their own vocab-parallel sampling, or a broadcast of rank 0's token-feedback
// buffer after rank 0 sampled the gathered logits.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "engine/model_executor.h"
#include "kestrel/engine_config.h"
#include "parallel/process_group.h"
#include "runtime/model_runner.h"

namespace kestrel {

class Communicator;
class LocalWorkers;

class TensorParallelExecutor final : public ModelExecutor, private StepBroadcast {
 public:
  // `role`: this process's place when a launcher started it (rank 0); nullopt: start the
  // workers here. tensor_parallel_size 1 makes a group of rank 0 alone (for measurements
  // and tests of this path on one device). Throws kestrel::Error when the group cannot be formed or a rank cannot
  // load its shard (naming it).
  TensorParallelExecutor(const std::string& model_dir, const EngineConfig& config,
                         const std::optional<RankInfo>& role);
  ~TensorParallelExecutor() override;

  std::vector<SampledToken> execute(const ScheduledBatch& batch) override;
  // The overlap (model_executor.h) of rank 0's runner: the other ranks read the pending
  // tokens from their token-feedback buffers, which rank 0 fills after each sampling
  // (ModelRunner::share_sampled_tokens), or get them resolved in the batch (CPU ranks).
  bool supports_overlap() const override { return runner_->supports_overlap(); }
  bool samples_pending_tokens() const override { return runner_->samples_pending_tokens(); }
  void launch(const ScheduledBatch& batch) override;
  bool supports_deferred_sampling() const override { return runner_->supports_deferred_sampling(); }
  void launch_forward(const ScheduledBatch& batch) override;
  void launch_sampling(const ScheduledBatch& batch) override;
  std::vector<SampledToken> collect() override;
  void discard() override;
  ModelRunner& runner() { return *runner_; }
  // Empty while the group is whole; otherwise why it is not (a worker died, a collective
  // failed), also before any step found out. Any thread.
  std::string failure() const;

 private:
  void forward(const HostBatch& batch) override;
  void time_decode(int batch, int context_len, int iters) override;
  void kv_clamped() override;
  // Runs `f`; an Error from it (or a dead worker) breaks the group for good.
  template <typename F>
  auto guarded(F&& f);
  [[noreturn]] void fail(const std::string& what);
  // The watchdog's report of a dead worker, waiting up to `ms` for one (an error may come
  // before the watchdog's next look). Empty when none died.
  std::string dead_worker(int ms);
  void watch_workers();
  void stop_watchdog();

  std::unique_ptr<LocalWorkers> workers_;  // null when a launcher started the ranks
  std::unique_ptr<ProcessGroup> group_;
  std::unique_ptr<ModelRunner> runner_;
  std::string failure_;  // set once the group is broken; written under mutex_ by the
                         // thread that drives steps, which alone reads it unlocked

  // Only the watchdog thread touches workers_ while it runs.
  std::thread watchdog_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::string dead_worker_;                      // what the watchdog saw, under mutex_
  std::atomic<Communicator*> abort_target_{nullptr};  // the runner's, once it exists
};

}  // namespace kestrel
