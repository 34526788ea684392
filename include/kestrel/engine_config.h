// EngineConfig: how the engine is sized and what it may do.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kestrel {

struct EngineConfig {
  // "auto" (CUDA if built and a GPU is present, else CPU), "cpu" or "cuda".
  std::string device = "auto";
  // Most sequences in one step.
  int max_num_seqs = 256;
  // Token budget of one step (prompt chunks plus decodes).
  int max_num_batched_tokens = 8192;
  // Longest sequence (prompt + output). 0: the model's max_position_embeddings.
  int max_model_len = 0;
  // Tokens per KV block. A power of two.
  int block_size = 16;
  // KV blocks to allocate. 0: size the cache from memory (kv_cache_memory_bytes on the CPU,
  // gpu_memory_utilization on a GPU).
  int num_kv_blocks = 0;
  // CPU backend: bytes for the KV cache when num_kv_blocks is 0.
  int64_t kv_cache_memory_bytes = int64_t{4} << 30;
  // CUDA backend: fraction of device memory the engine may use.
  float gpu_memory_utilization = 0.9f;
  // Storage of the KV cache: "auto" (the backend's compute dtype: bf16 on CUDA, f32 on the
  // CPU), "bf16" (the same), or "fp8" / "fp8_e4m3" (8-bit e4m3 with a power-of-two scale per
  // layer and KV head: twice the tokens in the same memory; docs/kv_cache.md).
  std::string kv_cache_dtype = "auto";
  bool enable_prefix_caching = true;
  // When false, a prompt must fit in one step's budget and is never split.
  bool enable_chunked_prefill = true;
  // CPU backend threads; 0: all cores.
  int num_threads = 0;
  // CUDA backend: no CUDA graphs.
  bool enforce_eager = false;
  // Schedule and launch each step before the previous one's tokens are back, so that the
  // host's work hides behind the device's (llm_engine.h). Outputs are the same either way.
  bool async_scheduling = true;
  // Seed for requests that bring none.
  uint64_t seed = 0;
  // The chat template to use instead of tokenizer_config.json's (vLLM's --chat-template): a
  // path to a Jinja file, or the template itself. Empty: the model's. One that does not
  // parse, or a path that does not exist, fails the engine's construction.
  std::string chat_template;
  // Ranks that hold one shard of the model each (docs/parallel.md). On one host the engine
  // starts ranks 1..N-1 itself, as copies of this executable on GPUs 1..N-1 (or CPU
  // processes); under a launcher (mpirun, srun) every process runs the same command with
  // tp_rendezvous set. N must divide the model's query heads and MLP width.
  int tensor_parallel_size = 1;
  // A directory every rank can reach (a shared filesystem across hosts) where the ranks of
  // a launcher-started group meet. Empty: one host, a private directory made per engine.
  std::string tp_rendezvous;
  // The program (argv, looked up on PATH) that ranks 1..N-1 on this host are started as,
  // followed by --kestrel-tp-worker. Empty: this executable (/proc/self/exe). The Python
  // package sets it to its interpreter and `-m kestrel._worker`.
  std::vector<std::string> tp_worker_command;
};

}  // namespace kestrel
