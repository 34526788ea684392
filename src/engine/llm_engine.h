// LLMEngine: requests in, tokens out, one step at a time.
//
// Each step runs Scheduler::schedule -> ModelExecutor::execute -> Scheduler::postprocess
// and reports the requests that changed. It owns the requests' sequences, the block
// manager and the scheduler; the executor (which owns the model and the KV tensors sized
// num_kv_blocks x block_size) is borrowed.
//
// A request with n > 1 becomes n sequences with seeds sample_seed(request seed, i). Sample
// 0 is scheduled first; the others are queued once its prompt is computed and start from
// its full prompt blocks (see scheduler.h), so the prompt is computed about once.
//
// Overlap (async_scheduling, vLLM's "async scheduling"): step k is scheduled and launched
// before step k - 1's tokens are back, so the host's scheduling, batch preparation and
// output handling run while the device computes. Sequences that sampled in k - 1 carry a
// placeholder for that token (the executor feeds the real one on the device); each step()
// launches k, then collects and settles k - 1 and returns its outputs. A sequence that k - 1
// ends by EOS or a stop token spent a row of k for nothing; ends by length are known ahead
// and not scheduled. The engine settles first (no overlap for that step) when a token must
// be known before the next step: penalties (they count it), a schedule that might preempt,
// and aborts. Outputs and tokens are the same as without overlap.
//
// Not thread-safe: one thread calls everything (the server wraps the engine in its own
// loop). If the executor throws, the exception propagates and the step (with overlap, the
// steps in flight) is undone except for block allocations, which the next step reuses; the
// engine can go on.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/block_manager.h"
#include "engine/model_executor.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "kestrel/request_output.h"
#include "kestrel/sampling_params.h"

namespace kestrel {

// What the engine runs with, resolved once from EngineConfig, the model and the device
// (runtime/engine_limits.h): the scheduler's limits (max_num_seqs, max_num_batched_tokens,
// max_model_len, chunked prefill, EOS ids; Scheduler::max_model_len() is the one in effect)
// and the rest.
struct EngineLimits : SchedulerConfig {
  int block_size = 16;
  int num_kv_blocks = 0;  // >= 1
  bool enable_prefix_caching = true;
  int vocab_size = 0;  // >= 1; prompt and stop ids must lie in [0, vocab_size)
  // Seeds the draw of a per-request seed for requests that bring none.
  uint64_t seed = 0;
  // Overlap the host's work with the executor's (see the class comment); used only when the
  // executor supports_overlap().
  bool async_scheduling = false;
};

struct EngineStats {
  int num_running = 0;
  int num_waiting = 0;
  int num_free_kv_blocks = 0;
  double kv_cache_usage = 0.0;       // fraction of KV blocks in use, [0, 1]
  int64_t prefix_cache_queries = 0;  // tokens
  int64_t prefix_cache_hits = 0;     // tokens
  double prefix_cache_hit_rate = 0.0;
  int64_t num_preemptions = 0;
  int64_t total_prompt_tokens = 0;      // prompt lengths of requests added
  int64_t total_generation_tokens = 0;  // tokens sampled
  int64_t total_computed_tokens = 0;    // tokens whose K/V was computed (recompute included)
  int64_t num_steps = 0;
  int64_t num_overlapped_steps = 0;  // launched while the step before was in flight
};

// Seed of sample `sample_index` of a request seeded with `request_seed`:
// XXH3_64bits_withSeed(sample_index as 8 little-endian bytes, request_seed).
uint64_t sample_seed(uint64_t request_seed, int sample_index);

class LLMEngine {
 public:
  // Throws Error on a bad limit (vocab_size, num_kv_blocks, block_size, ... < 1).
  LLMEngine(const EngineLimits& limits, ModelExecutor& executor);
  ~LLMEngine();
  LLMEngine(const LLMEngine&) = delete;
  LLMEngine& operator=(const LLMEngine&) = delete;

  // Queues a request. Throws Error, leaving the engine unchanged, when the id is already
  // in use, the params are out of range, the prompt is empty, has a token outside
  // [0, vocab_size) or is too long (prompt_len >= max_model_len()).
  void add_request(std::string request_id, std::vector<int> prompt, SamplingParams params);

  // Finishes every sample of the request with "abort" and frees its blocks. The request is
  // forgotten at once (no output for it from later steps). False when the id is unknown
  // (never added or already finished).
  bool abort_request(const std::string& request_id);

  // Finishes one sample of a request with "abort" and frees its blocks (the server does this
  // when a stop string matches); the other samples go on. When it was the last unfinished
  // sample, the request is forgotten as by abort_request. False when the request is unknown
  // or the sample does not exist or already finished.
  bool abort_sample(const std::string& request_id, int sample_index);

  // Runs one step. Returns one RequestOutput per request that got tokens or finished in
  // this step, as its params.output_kind asks: the cumulative output of all its n samples,
  // only what this step added to each (kDelta: the prompt ids in the first report only), or
  // nothing until it finishes (kFinalOnly). A finished request is reported once and
  // forgotten. Empty when there was nothing to do.
  std::vector<RequestOutput> step();

  // Whether step() has more to do or to return.
  bool has_unfinished() const { return !requests_.empty() || !drained_.empty(); }
  EngineStats stats() const;
  // The max_model_len in effect (Scheduler::max_model_len()).
  int max_model_len() const { return scheduler_.max_model_len(); }
  const BlockManager& block_manager() const { return block_manager_; }

 private:
  struct Request {
    std::shared_ptr<const SamplingParams> params;
    std::vector<std::unique_ptr<Sequence>> samples;
    std::vector<size_t> reported;  // kDelta: output tokens of each sample already reported
    bool prompt_reported = false;  // kDelta
    bool prompt_logprobs_reported = false;  // kDelta
  };
  // The request's output under its params' output_kind; records what a delta reported.
  RequestOutput make_output(const std::string& request_id, Request& request) const;
  // Checks a step's tokens (one per sampled sequence, in the vocabulary) and counts them.
  void count_step(const ScheduledBatch& batch, std::span<const SampledToken> sampled);
  // Appends the outputs of the requests whose sequences changed; ends finished requests.
  void report(const std::vector<Sequence*>& changed, std::vector<RequestOutput>& outputs);
  // The overlapped step() and its parts.
  std::vector<RequestOutput> step_overlapped();
  // What the step in flight (if any) must have settled before the next step: nothing; its
  // sampling (a row's sampling needs the token in flight: the next step's forward launches
  // first, ModelExecutor::launch_sampling); or its scheduling (the scheduler may have to
  // preempt, or the executor cannot defer sampling).
  enum class Settle { kNone, kBeforeSampling, kBeforeScheduling };
  Settle settle_needed() const;
  void settle_oldest(std::vector<RequestOutput>& outputs);  // REQUIRES: !in_flight_.empty()
  void undo_in_flight();
  // With overlap: collects and settles the step in flight, its outputs kept for the next
  // step() (before an abort, which must not leave a step using a destroyed sequence). Never
  // throws: a step that fails here is undone instead.
  void drain();

  const EngineLimits limits_;
  ModelExecutor& executor_;
  BlockManager block_manager_;
  Scheduler scheduler_;
  std::unordered_map<std::string, Request> requests_;
  std::mt19937_64 seed_rng_;
  int64_t next_seq_id_ = 0;
  int64_t total_prompt_tokens_ = 0;
  int64_t total_generation_tokens_ = 0;
  int64_t total_computed_tokens_ = 0;
  int64_t num_steps_ = 0;
  int64_t num_overlapped_steps_ = 0;

  const bool overlap_;
  std::deque<ScheduledBatch> in_flight_;  // launched, not settled, oldest first
  std::vector<RequestOutput> drained_;    // settled by drain(), not yet returned
  // Finished requests a step still in flight may name: kept alive until it is settled.
  std::vector<Request> retired_;
};

}  // namespace kestrel
