// ModelRunner: owns the backend, the model weights and the KV cache, and runs one
// scheduled step (ModelExecutor) end to end: batch preparation, forward, sampling.
//
// Start-up: load the weights; on a GPU, profile one forward at the largest step and give
// the KV cache what gpu_memory_utilization leaves (kv_cache_sizing.h); an fp8 cache gets
// its scales from the checkpoint or a calibration prompt (kv_scales.h); then, unless
// enforce_eager, capture one CUDA graph per decode batch size (cuda_graph_runner.h).
// Each step: the batch's inputs go to fixed device buffers in one copy (step_inputs.h); a
// pure-decode step (every sequence computes one token and samples it) of up to the largest
// captured size replays the graph of the next captured size, padded; any other step runs
// eagerly. Sampling runs on the device when the backend has a sampler (its inputs come from
// device_sampling_batch.h), else on the host from the copied logits (src/sampling).
//
// Tensor parallelism (docs/parallel.md): a runner may be one rank of a group. It then
// loads its shard, hands the model a Communicator (gloo on the CPU, NCCL on CUDA), agrees
// with the other ranks on the KV block count, and captures its graphs with the collectives
// inside. Rank 0's runner is the one the engine drives; before each device step it tells
// the other ranks (StepBroadcast), whose runners run the same step through run_forward().
// Only rank 0 samples, except that on GPUs every rank samples its vocab shard of the rows
// that allow it (set_up_vocab_sampling).
//
// Not thread-safe: one thread drives a runner.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/model_executor.h"
#include "io/model_config.h"
#include "kestrel/engine_config.h"
#include "runtime/batch_builder.h"
#include "runtime/sampled_row.h"

namespace kestrel {

class CausalLM;
class Communicator;
class CudaGraphRunner;
class ProcessGroup;
class StepInputs;
struct StepShape;

// What the runner did so far; for logs, benchmarks and tests.
struct RunnerStats {
  int64_t graph_steps = 0;  // steps replayed from a CUDA graph
  int64_t eager_steps = 0;  // steps run op by op
  int64_t vocab_parallel_steps = 0;  // steps sampled from each rank's vocab shard
  int num_graphs = 0;       // graphs captured at start-up
  double graph_capture_seconds = 0.0;
  size_t activation_bytes = 0;      // device memory the profile forward added (0 on the CPU)
  double kv_max_concurrency = 0.0;  // sequences of max_model_len tokens the cache holds
  // Host wall time inside execute(), by phase, summed over steps. Nothing synchronizes for
  // them: "sample" includes waiting for the forward the launch enqueued.
  double prepare_seconds = 0.0;  // build the host batch, copy it to the device
  double launch_seconds = 0.0;   // enqueue the forward (graph or op by op) and device sampler
  double sample_seconds = 0.0;   // device sampler: wait for the tokens; else sample on the host
};

// KESTREL_TP_ALWAYS=1: one device runs the tensor-parallel path anyway (LLM through the
// executor with a group of one; a runner outside any group through a one-rank NCCL
// communicator), so that the collectives' path is measured and tested on one GPU.
bool tp_always_requested();

// This process's place in a tensor-parallel group.
struct TensorParallelRank {
  ProcessGroup* group = nullptr;  // outlives the runner
  int device_index = 0;           // the GPU this rank runs on (its local rank)
};

// Rank 0's runner calls these before each device step that the other ranks must join.
class StepBroadcast {
 public:
  virtual ~StepBroadcast() = default;
  virtual void forward(const HostBatch& batch) = 0;
  virtual void time_decode(int batch, int context_len, int iters) = 0;
  virtual void kv_clamped() = 0;  // kv_cache_clamped()'s count, which every rank joins
};

class ModelRunner : public ModelExecutor {
 public:
  // Loads the model onto the configured device and allocates the KV cache. Throws
  // kestrel::Error for bad model files, an unavailable device or too little memory (the
  // message says how much is missing). With `tp`, loads that rank's shard; every rank of
  // the group must construct its runner at the same time (the constructor runs
  // collectives).
  ModelRunner(const std::string& model_dir, const EngineConfig& config,
              const TensorParallelRank* tp = nullptr);
  ~ModelRunner() override;

  std::vector<SampledToken> execute(const ScheduledBatch& batch) override;
  // The overlapped form (model_executor.h). With a device sampler, launch() returns once
  // the step is enqueued: pending tokens are fed on the device (token feedback). Otherwise
  // the step runs at launch() and pending tokens are taken from the last launch's samples.
  bool supports_overlap() const override { return true; }
  // Without token feedback the runner knows the pending tokens at launch() and puts them in
  // the sampler's output ids; with it, the device sampler must read them from its feedback
  // buffer (Backend::samples_pending_tokens; docs/engine.md).
  bool samples_pending_tokens() const override {
    return !token_feedback_ || backend_->samples_pending_tokens();
  }
  void launch(const ScheduledBatch& batch) override;
  // On by default, host and device samplers alike; KESTREL_DEFER_SAMPLING=0 turns it off
  // (docs/engine.md).
  bool supports_deferred_sampling() const override { return defer_sampling_; }
  void launch_forward(const ScheduledBatch& batch) override;
  void launch_sampling(const ScheduledBatch& batch) override;
  std::vector<SampledToken> collect() override;
  void discard() override;

  // Rank 0 of a group: `broadcast` (which outlives the runner) hears of every device step
  // before it runs. nullptr: none.
  void set_step_broadcast(StepBroadcast* broadcast) { broadcast_ = broadcast; }
  // The forward over an already built batch, without sampling: what the other ranks of a
  // group run for each step rank 0 broadcasts. Returns the logits (valid until the next
  // step): a graph replay for a pure-decode batch within the captured sizes, else op by op.
  Tensor run_forward(const HostBatch& batch);
  // After run_forward(batch): the logits of batch.prompt_rows (CausalLM::row_logits), in
  // slices of at most max_num_seqs rows; `use` (rank 0; null on the other ranks, which only
  // join the collectives) gets each slice's first index into prompt_rows and its logits.
  // Every rank calls it after each step that has prompt rows.
  void run_prompt_logits(const HostBatch& batch,
                         const std::function<void(size_t first, const Tensor& logits)>& use);
  // A worker's part in sampling the step run_forward(batch) gave `logits`: the vocab-parallel
  // sampler over its shard when rank 0 sent the rows (batch.row_sampling), else the logits'
  // gather (under vocab-parallel logits) and share_sampled_tokens(). Every rank other than 0
  // calls it after each step.
  void join_sampling(const HostBatch& batch, const Tensor& logits);
  // Rank 0's sampled tokens of the last launch into every rank's token-feedback buffer, so
  // that the next step's pending tokens read the same ids everywhere. Every rank calls it
  // after each step with sampled rows (rank 0 from launch()); a no-op outside a group or
  // without token feedback.
  void share_sampled_tokens();
  // The group's tensor communicator, or null when the model is not sharded.
  Communicator* communicator() { return model_comm_; }

  const ModelConfig& model_config() const;
  Backend& backend() { return *backend_; }
  int num_kv_blocks() const { return num_kv_blocks_; }
  int block_size() const { return block_size_; }
  // EngineConfig's max_model_len, or the model's max_position_embeddings when it gives none.
  int max_model_len() const { return max_model_len_; }
  size_t kv_cache_bytes() const { return kv_cache_bytes_; }
  // The cache stores fp8 (EngineConfig::kv_cache_dtype; kv_scales.h says how it is scaled).
  bool kv_cache_fp8() const { return kv_fp8_; }
  // "F8_E4M3", or the backend's compute dtype ("BF16", "F32").
  DType kv_cache_dtype() const { return kv_fp8_ ? DType::kF8E4M3 : backend_->compute_dtype(); }
  // The cache, one entry per layer (tests and tools read an fp8 cache's scales from it).
  const std::vector<LayerKvCache>& kv_cache() const { return kv_cache_; }
  // Values the fp8 cache clamped since its scales were set (0 for another cache), of every
  // rank's KV heads, each head counted once where ranks replicate it. Reads the device's
  // counters: waits for every step launched so far. In a group, rank 0's call has the other
  // ranks join (StepBroadcast::kv_clamped), whose loops call it too.
  int64_t kv_cache_clamped();
  size_t weight_bytes() const;
  // EOS ids: generation_config.json's, else config.json's.
  const std::vector<int>& eos_token_ids() const { return eos_token_ids_; }
  // generation_config.json (all fields empty when the file is absent).
  const GenerationDefaults& generation_defaults() const { return generation_; }
  const RunnerStats& stats() const { return stats_; }

  // Benchmark aid: the device time of one decode forward (no sampling) of `batch` sequences
  // with `context_len` tokens each, averaged over `iters` back-to-back runs, in seconds;
  // through the captured graph when there is one for the batch, else op by op. Its block
  // tables read whatever the KV cache holds and it writes no KV. Call only between steps,
  // never while a request is mid-step. Throws kestrel::Error for sizes beyond the limits.
  double time_decode_forward(int batch, int context_len, int iters);

 private:
  int size_kv_cache(const EngineConfig& config, size_t free_after_weights);
  HostBatch prompt_batch(int num_seqs, int num_tokens) const;
  void profile_run();
  void set_up_kv_scales(const std::string& model_dir);
  // backend_->allocate_kv_cache(spec); throws kestrel::Error when the backend stores another
  // dtype than the spec asks for.
  std::vector<LayerKvCache> allocate_kv_cache(const KvCacheSpec& spec);
  void warm_up_prompt_sizes();
  // Tensor parallelism on devices whose backend has the vocab-parallel sampler: the model's
  // forward keeps each rank's LM-head columns (CausalLM::set_vocab_parallel_logits), and
  // steps whose rows allow it are sampled there (docs/parallel.md). The ranks agree; off with
  // KESTREL_TP_VOCAB_SAMPLING=0 on any rank.
  void set_up_vocab_sampling();
  void capture_graphs();
  StepShape graph_shape(int size) const;
  Tensor forward(const StepShape& shape, int max_query_len, int max_seq_len);
  // Rank 0: the prompt logprobs of the step's prompt rows into their sequences, at once.
  void fill_prompt_logprobs(const ScheduledBatch& batch, const HostBatch& host_batch);
  // The rows of logits F32 [R <= max_num_seqs, V] in host memory: their own on the CPU, else
  // copied into host_logits_ (valid until the next call).
  const float* logits_on_host(const Tensor& logits);
  // Host sampling (no device sampler), at once.
  std::vector<SampledToken> sample_on_host(const Tensor& logits, const ScheduledBatch& batch,
                                           const HostBatch& host_batch, RowView view);
  // launch() and launch_forward(): the batch's forward, then (unless `defer_sampling`) its
  // sampling through finish_step(); deferred, the forward's logits wait in deferred_.
  void start_step(const ScheduledBatch& batch, bool defer_sampling);
  // The sampler's launch (or host sampling), the prompt logprobs and the Launched entry.
  void finish_step(const ScheduledBatch& batch, const HostBatch& hb, const Tensor& logits,
                   const SamplingBatch& sampling, bool vocab_parallel, RowView view);

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Communicator> host_comm_;  // the group's host side (gloo, or local)
  std::unique_ptr<Communicator> comm_;       // what the model's collectives run on
  Communicator* model_comm_ = nullptr;       // comm_, host_comm_ (CPU ranks) or none
  StepBroadcast* broadcast_ = nullptr;
  std::unique_ptr<CausalLM> model_;
  std::vector<LayerKvCache> kv_cache_;
  std::unique_ptr<StepInputs> inputs_;
  std::unique_ptr<CudaGraphRunner> graphs_;  // null when eager
  Tensor graph_logits_;                      // where every graph writes its logits
  Tensor host_logits_;                       // F32 [max_num_seqs, V], for host sampling
  bool kv_fp8_ = false;
  int block_size_ = 0;
  int max_model_len_ = 0;
  int max_num_batched_tokens_ = 0;
  int max_num_seqs_ = 0;
  int num_kv_blocks_ = 0;
  size_t kv_cache_bytes_ = 0;
  GenerationDefaults generation_;
  std::vector<int> eos_token_ids_;
  RunnerStats stats_;

  // A launched step not yet collected.
  struct Launched {
    bool on_device = false;            // its tokens come from the backend's collect_sample()
    std::vector<SampledToken> tokens;  // otherwise, these (empty: nothing sampled)
  };
  std::deque<Launched> launched_;
  // A step whose forward launch_forward() started and whose sampling waits (logits gathered
  // where the model's are vocab-parallel).
  struct Deferred {
    HostBatch hb;
    Tensor logits;
  };
  std::optional<Deferred> deferred_;
  bool defer_sampling_ = true;  // supports_deferred_sampling()
  bool token_feedback_ = false;   // the backend feeds pending tokens itself
  bool vocab_sampling_ = false;   // set_up_vocab_sampling()
  std::vector<int> last_tokens_;  // otherwise: the last launch's tokens, by sampled row
  // `id`, or for a pending token the last launch's token it stands for (no token feedback).
  int settled_token(int id) const;
};

}  // namespace kestrel
