// LLMStats: what an LLM has done so far, for servers (/metrics), benchmarks and tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kestrel {

// A snapshot (LLM::stats()). Counters ("total", "seconds") only grow over the LLM's life;
// take two snapshots and subtract to time a stretch of steps.
struct LLMStats {
  // Scheduler.
  int num_running = 0;  // sequences in the running batch
  int num_waiting = 0;  // sequences waiting to be scheduled (or rescheduled after preemption)
  int64_t num_steps = 0;
  // Steps launched while the step before was still on the device (async scheduling; not
  // while a request with a token constraint runs, or one with penalties where the device
  // sampler cannot count the token in flight).
  int64_t num_overlapped_steps = 0;
  int64_t num_preemptions = 0;
  // KV cache.
  int num_kv_blocks = 0;
  int block_size = 0;  // tokens per block
  int num_free_kv_blocks = 0;
  double kv_cache_usage = 0.0;       // fraction of KV blocks in use, [0, 1]
  int64_t prefix_cache_queries = 0;  // prompt tokens looked up
  int64_t prefix_cache_hits = 0;     // prompt tokens found
  double prefix_cache_hit_rate = 0.0;
  // What the cache stores: "fp8_e4m3", or the backend's unquantized "bf16" (CUDA) / "f32"
  // (CPU) (EngineConfig::kv_cache_dtype).
  std::string kv_cache_dtype;
  int kv_cache_element_bytes = 0;  // bytes of one stored K or V element: 1, 2 or 4
  // fp8 cache: values stored as +-448 x scale because they exceeded it, since start-up
  // (docs/kv_cache.md; under tensor parallelism every rank's KV heads, a replicated head
  // once), as of the engine's last
  // read of its device counters: every 1,024 steps, whenever the engine goes idle, and at
  // LLM::kv_cache_clamped(). Reading them waits for the device, so stats() does not. 0 for
  // another cache.
  int64_t kv_cache_clamped = 0;
  // Tokens.
  int64_t prompt_tokens = 0;      // prompt lengths of the requests added
  int64_t generation_tokens = 0;  // tokens sampled
  int64_t computed_tokens = 0;    // tokens whose K/V was computed (recomputation included)
  // Model runner (rank 0's under tensor parallelism).
  int64_t graph_steps = 0;  // steps replayed from a CUDA graph
  int64_t eager_steps = 0;  // steps run op by op
  // Steps whose rows every rank sampled from its own vocab shard (tensor parallelism on GPUs,
  // docs/parallel.md); the others' logits were gathered for rank 0's sampler.
  int64_t vocab_parallel_steps = 0;
  int num_graphs = 0;       // CUDA graphs captured at start-up
  double graph_capture_seconds = 0.0;
  size_t activation_bytes = 0;      // device memory the profile forward added (0 on the CPU)
  double kv_max_concurrency = 0.0;  // sequences of max_model_len tokens the cache holds
  // Host wall time inside the runner's steps, by phase. Nothing synchronizes for them:
  // "sample" includes waiting for the forward that "launch" enqueued.
  double prepare_seconds = 0.0;  // build the host batch, copy it to the device
  double launch_seconds = 0.0;   // enqueue the forward and the device sampler
  double sample_seconds = 0.0;   // wait for the tokens (device sampler) or sample on the host
  // The collectives' library under tensor parallelism ("nccl", "gloo"); "" without.
  std::string communicator;
};

// The backend's device memory as the driver reports it now (LLM::device_memory()).
struct DeviceMemory {
  size_t total = 0;
  size_t free = 0;
};

}  // namespace kestrel
