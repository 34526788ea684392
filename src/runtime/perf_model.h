// The floor of a generation workload on a device (DESIGN.md, "Performance model"): the time
// no implementation can beat, from the bytes decode must read and the FLOPs prefill must do,
// over the device's measured copy bandwidth and GEMM rate.
//
// Decode (memory-bound): each decode step of a sequence reads its whole KV cache, the new
// token's included, and each step reads the weights once. A sequence with a prompt of P
// tokens and O output tokens gets its first token from prefill and O - 1 decode steps; step
// k (1..O-1) reads P + k tokens of KV. The workload needs at least
// max(max O - 1, ceil(sum (O - 1) / max_num_seqs)) decode steps.
// Prefill (compute-bound): 2 FLOPs per weight of the layers' GEMMs per prompt token, the LM
// head once per sequence, and causal attention (QK^T and PV: 2 Hq D (P^2 + P) per layer).
//
// Pure arithmetic, no device: testable anywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "io/model_config.h"

namespace kestrel {

struct WorkloadCost {
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  int64_t decode_steps = 0;      // the fewest the workload allows
  double kv_read_bytes = 0;      // over all decode steps
  double weight_read_bytes = 0;  // weight_bytes x decode_steps
  double prefill_flops = 0;
};

// KV bytes per token over all layers, K and V, in a cache of `kv_dtype_size`-byte elements.
double kv_bytes_per_token(const ModelConfig& config, size_t kv_dtype_size);

// prompt_lens[i] and output_lens[i] (>= 1) describe sequence i. With tensor_parallel_size
// N > 1 the cost is one rank's (the ranks work in parallel, so a rank's cost over one
// device's ceilings is the floor): its share of the KV heads (Hkv / N, or one head when N
// exceeds Hkv and they are replicated) and 1/N of the FLOPs; `weight_bytes` is then that
// rank's shard already.
WorkloadCost workload_cost(const ModelConfig& config, size_t weight_bytes, size_t kv_dtype_size,
                           const std::vector<int>& prompt_lens, const std::vector<int>& output_lens,
                           int max_num_seqs, int tensor_parallel_size = 1);

// Seconds: (kv + weight bytes) / copy_bytes_per_second, prefill_flops / flops_per_second.
// 0 when the ceiling is unknown (<= 0).
double decode_floor_seconds(const WorkloadCost& cost, double copy_bytes_per_second);
double prefill_floor_seconds(const WorkloadCost& cost, double flops_per_second);

}  // namespace kestrel
