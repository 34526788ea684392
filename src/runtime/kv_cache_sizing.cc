#include "runtime/kv_cache_sizing.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace kestrel {

std::string format_gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / (1ull << 30)); }

void check_weights_fit(size_t total, size_t free_now, size_t weight_bytes,
                       float gpu_memory_utilization) {
  const double share = static_cast<double>(total) * gpu_memory_utilization;
  const double in_use = static_cast<double>(total) - static_cast<double>(free_now);
  const double room = share - in_use;
  if (static_cast<double>(weight_bytes) <= room) return;
  throw_error(
      "the model's weights need {} but only {} of the device's {} is available "
      "(gpu_memory_utilization {} allows {}, {} is already in use): short by {}; raise "
      "--gpu-memory-utilization or use a device with more memory",
      format_gib(static_cast<double>(weight_bytes)), format_gib(std::max(room, 0.0)),
      format_gib(static_cast<double>(total)), gpu_memory_utilization, format_gib(share),
      format_gib(in_use), format_gib(static_cast<double>(weight_bytes) - room));
}

KvCacheSize size_kv_cache_for_device(const DeviceMemoryProfile& p, float gpu_memory_utilization,
                                     size_t bytes_per_block, int block_size, int max_model_len) {
  KS_CHECK(gpu_memory_utilization > 0.0f && gpu_memory_utilization <= 1.0f,
           "gpu_memory_utilization must be in (0, 1], got {}", gpu_memory_utilization);
  KS_CHECK(bytes_per_block > 0 && block_size > 0 && max_model_len > 0,
           "KV sizing: bad geometry ({} bytes per block, block size {}, max_model_len {})",
           bytes_per_block, block_size, max_model_len);
  const double total = static_cast<double>(p.total);
  const double share = total * gpu_memory_utilization;
  const double in_use = total - static_cast<double>(p.free_after_profile);
  const double budget = share - in_use;
  const int64_t blocks_per_seq = (int64_t{max_model_len} + block_size - 1) / block_size;
  const double needed = static_cast<double>(blocks_per_seq) * static_cast<double>(bytes_per_block);
  const double other = std::max(
      in_use - static_cast<double>(p.weight_bytes) - static_cast<double>(p.activation_bytes), 0.0);
  if (budget < needed) {
    throw_error(
        "not enough device memory for the KV cache: one sequence of max_model_len {} tokens "
        "needs {}, but gpu_memory_utilization {} of {} leaves {} after weights {}, activations "
        "{} and {} used otherwise: short by {}; raise --gpu-memory-utilization, or lower "
        "--max-model-len or --max-num-batched-tokens",
        max_model_len, format_gib(needed), gpu_memory_utilization, format_gib(total),
        format_gib(std::max(budget, 0.0)), format_gib(static_cast<double>(p.weight_bytes)),
        format_gib(static_cast<double>(p.activation_bytes)), format_gib(other),
        format_gib(needed - budget));
  }
  KvCacheSize s;
  const double blocks = std::min(budget / static_cast<double>(bytes_per_block), double(1 << 30));
  s.num_blocks = static_cast<int>(blocks);
  s.bytes = static_cast<size_t>(s.num_blocks) * bytes_per_block;
  s.max_concurrency = static_cast<double>(s.num_blocks) / static_cast<double>(blocks_per_seq);
  s.summary = fmt::format(
      "device {} x {} = {}: weights {}, activations {}, other {}; KV cache {} = {} blocks of {} "
      "tokens ({} tokens), {:.1f} concurrent sequences of {} tokens",
      format_gib(total), gpu_memory_utilization, format_gib(share),
      format_gib(static_cast<double>(p.weight_bytes)),
      format_gib(static_cast<double>(p.activation_bytes)), format_gib(other),
      format_gib(static_cast<double>(s.bytes)), s.num_blocks, block_size,
      int64_t{s.num_blocks} * block_size, s.max_concurrency, max_model_len);
  return s;
}

int kv_blocks_for_host_budget(int64_t budget_bytes, size_t bytes_per_block, int max_num_seqs,
                              int max_model_len, int block_size) {
  const int64_t useful =
      int64_t{max_num_seqs} * ((int64_t{max_model_len} + block_size - 1) / block_size);
  const int64_t affordable = budget_bytes / static_cast<int64_t>(bytes_per_block);
  const int64_t blocks = std::min(useful, affordable);
  KS_CHECK(blocks >= 1, "kv_cache_memory_bytes {} is less than one KV block ({} bytes)",
           budget_bytes, bytes_per_block);
  return static_cast<int>(std::min<int64_t>(blocks, 1 << 30));
}

}  // namespace kestrel
