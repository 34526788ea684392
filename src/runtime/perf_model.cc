#include "runtime/perf_model.h"

#include <algorithm>

#include "core/error.h"

namespace kestrel {

double kv_bytes_per_token(const ModelConfig& c, size_t kv_dtype_size) {
  return 2.0 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim *
         static_cast<double>(kv_dtype_size);
}

WorkloadCost workload_cost(const ModelConfig& c, size_t weight_bytes, size_t kv_dtype_size,
                           const std::vector<int>& prompt_lens, const std::vector<int>& output_lens,
                           int max_num_seqs, int tensor_parallel_size) {
  KS_CHECK(prompt_lens.size() == output_lens.size(), "workload_cost: {} prompts, {} outputs",
           prompt_lens.size(), output_lens.size());
  KS_CHECK(max_num_seqs > 0, "workload_cost: max_num_seqs must be positive");
  KS_CHECK(tensor_parallel_size >= 1, "workload_cost: tensor_parallel_size must be >= 1");
  const double N = tensor_parallel_size;
  const double H = c.hidden_size, I = c.intermediate_size, D = c.head_dim;
  const double Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const double layer_params = H * (Hq + 2 * Hkv) * D + Hq * D * H + H * 2 * I + I * H;
  // A rank's KV heads: its share, or one replicated head.
  const double rank_kv_share = std::max(Hkv / N, 1.0) / Hkv;
  const double per_token_kv = kv_bytes_per_token(c, kv_dtype_size) * rank_kv_share;

  WorkloadCost w;
  int64_t max_decode = 0, total_decode = 0;
  for (size_t i = 0; i < prompt_lens.size(); ++i) {
    const double P = prompt_lens[i];
    const int64_t O = output_lens[i];
    KS_CHECK(prompt_lens[i] >= 1 && O >= 1, "workload_cost: sequence {} has prompt {} output {}",
             i, prompt_lens[i], O);
    w.prompt_tokens += prompt_lens[i];
    w.output_tokens += O;
    const double steps = static_cast<double>(O - 1);
    w.kv_read_bytes += (steps * P + steps * (steps + 1) / 2) * per_token_kv;
    max_decode = std::max(max_decode, O - 1);
    total_decode += O - 1;
    w.prefill_flops += (2 * layer_params * c.num_hidden_layers * P +
                        2 * c.num_hidden_layers * Hq * D * (P * P + P) + 2.0 * c.vocab_size * H) /
                       N;
  }
  w.decode_steps = std::max(max_decode, (total_decode + max_num_seqs - 1) / max_num_seqs);
  w.weight_read_bytes = static_cast<double>(weight_bytes) * static_cast<double>(w.decode_steps);
  return w;
}

double decode_floor_seconds(const WorkloadCost& cost, double copy_bytes_per_second) {
  if (copy_bytes_per_second <= 0) return 0;
  return (cost.kv_read_bytes + cost.weight_read_bytes) / copy_bytes_per_second;
}

double prefill_floor_seconds(const WorkloadCost& cost, double flops_per_second) {
  if (flops_per_second <= 0) return 0;
  return cost.prefill_flops / flops_per_second;
}

}  // namespace kestrel
