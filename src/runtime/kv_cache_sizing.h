// How many KV blocks the cache gets.
//
// On a GPU (vLLM's rule): the engine may use gpu_memory_utilization of the device's memory.
// After the weights are loaded and one forward at the largest step (max_num_batched_tokens
// tokens, max_num_seqs sampled rows) has run, everything in use on the device (weights,
// activations, which the stream-ordered pool keeps reserved at their peak, library
// workspaces, and whatever else runs on the GPU) is subtracted from that share; the KV
// cache gets the rest. Captured CUDA graphs and the attention's key-split scratch (a few
// MiB) come out of the remaining 1 - gpu_memory_utilization.
//
// On the CPU: a byte budget (kv_cache_memory_bytes), capped at what max_num_seqs
// full-length sequences could use.
//
// Pure arithmetic: no backend, testable anywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kestrel {

// Device memory, in bytes, as measured around the profile run.
struct DeviceMemoryProfile {
  size_t total = 0;               // device memory
  size_t free_after_profile = 0;  // free after weights + profile forward (+ sampler)
  size_t weight_bytes = 0;
  size_t activation_bytes = 0;    // what the profile forward added (workspace, peaks)
};

struct KvCacheSize {
  int num_blocks = 0;
  size_t bytes = 0;
  // Sequences of max_model_len tokens the cache holds at once.
  double max_concurrency = 0.0;
  std::string summary;  // one line for the log: weights, activations, KV, concurrency
};

// Throws kestrel::Error saying by how much the weights miss when weight_bytes exceed
// total * gpu_memory_utilization - (total - free_now).
void check_weights_fit(size_t total, size_t free_now, size_t weight_bytes,
                       float gpu_memory_utilization);

// Blocks of bytes_per_block in total * gpu_memory_utilization - (total - free_after_profile).
// Throws kestrel::Error, saying by how much memory is short, when that cannot hold one
// sequence of max_model_len tokens, or for a utilization outside (0, 1].
KvCacheSize size_kv_cache_for_device(const DeviceMemoryProfile& profile,
                                     float gpu_memory_utilization, size_t bytes_per_block,
                                     int block_size, int max_model_len);

// CPU: min(budget_bytes / bytes_per_block, max_num_seqs * blocks of max_model_len), at most
// 2^30. Throws kestrel::Error when the budget is less than one block.
int kv_blocks_for_host_budget(int64_t budget_bytes, size_t bytes_per_block, int max_num_seqs,
                              int max_model_len, int block_size);

// "1.23 GiB".
std::string format_gib(double bytes);

}  // namespace kestrel
