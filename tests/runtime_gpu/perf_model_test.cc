// The floor arithmetic of kestrel bench (src/runtime/perf_model.h) against hand-derived
// values and against DESIGN.md's figures for nano-vLLM's workload on Qwen3-0.6B.
#include <gtest/gtest.h>

#include "core/python_random.h"
#include "runtime/perf_model.h"

namespace kestrel {
namespace {

ModelConfig qwen3_06b() {
  ModelConfig c;
  c.vocab_size = 151936;
  c.hidden_size = 1024;
  c.intermediate_size = 3072;
  c.num_hidden_layers = 28;
  c.num_attention_heads = 16;
  c.num_key_value_heads = 8;
  c.head_dim = 128;
  return c;
}

TEST(PerfModel, HandDerivedSmallWorkload) {
  ModelConfig c;
  c.num_hidden_layers = 1;
  c.num_key_value_heads = 1;
  c.head_dim = 2;
  c.num_attention_heads = 1;
  c.hidden_size = 3;
  c.intermediate_size = 5;
  c.vocab_size = 7;
  EXPECT_EQ(kv_bytes_per_token(c, 2), 8.0);  // K and V, 2 elements of 2 bytes each
  // A: prompt 3, 3 outputs: decode steps read 4 and 5 tokens. B: prompt 2, 4 outputs: 3, 4, 5.
  // C: one output, no decode step.
  const WorkloadCost w = workload_cost(c, 1000, 2, {3, 2, 9}, {3, 4, 1}, 1);
  EXPECT_EQ(w.prompt_tokens, 14);
  EXPECT_EQ(w.output_tokens, 8);
  EXPECT_DOUBLE_EQ(w.kv_read_bytes, (4 + 5 + 3 + 4 + 5) * 8.0);
  EXPECT_EQ(w.decode_steps, 5);  // one sequence per step: 2 + 3 steps
  EXPECT_DOUBLE_EQ(w.weight_read_bytes, 5000.0);
  // Layer weights: qkv 3x(1+2)x2 = 18, o 2x3 = 6, gate_up 3x10 = 30, down 5x3 = 15: 69.
  // Per sequence: 2 x 69 x P + 2 x 1 x 1 x 2 x (P^2 + P) + 2 x 7 x 3.
  const double flops = (2 * 69 * 3 + 4 * 12 + 42) + (2 * 69 * 2 + 4 * 6 + 42) + (2 * 69 * 9 + 4 * 90 + 42);
  EXPECT_DOUBLE_EQ(w.prefill_flops, flops);
  EXPECT_EQ(workload_cost(c, 1000, 2, {3, 2, 9}, {3, 4, 1}, 8).decode_steps, 3);  // longest: 3
  EXPECT_DOUBLE_EQ(decode_floor_seconds(w, 2.0), (168.0 + 5000.0) / 2.0);
  EXPECT_DOUBLE_EQ(prefill_floor_seconds(w, 10.0), flops / 10.0);
  EXPECT_EQ(decode_floor_seconds(w, 0.0), 0.0);  // unknown ceiling: no floor
  // One rank of two: its single KV head is replicated (all of it read), half the FLOPs; the
  // weight bytes are whatever the rank holds (given).
  const WorkloadCost r = workload_cost(c, 500, 2, {3, 2, 9}, {3, 4, 1}, 1, 2);
  EXPECT_DOUBLE_EQ(r.kv_read_bytes, w.kv_read_bytes);
  EXPECT_DOUBLE_EQ(r.prefill_flops, flops / 2);
  EXPECT_DOUBLE_EQ(r.weight_read_bytes, 2500.0);
  // Eight KV heads over two ranks: four each, half the KV bytes; over 16 ranks, one each.
  c.num_key_value_heads = 8;
  c.num_attention_heads = 16;
  const double kv8 = workload_cost(c, 0, 2, {3, 2, 9}, {3, 4, 1}, 1).kv_read_bytes;
  EXPECT_DOUBLE_EQ(workload_cost(c, 0, 2, {3, 2, 9}, {3, 4, 1}, 1, 2).kv_read_bytes, kv8 / 2);
  EXPECT_DOUBLE_EQ(workload_cost(c, 0, 2, {3, 2, 9}, {3, 4, 1}, 1, 16).kv_read_bytes, kv8 / 8);
}

// DESIGN.md: 142,827 prompt and 133,966 output tokens; 13.9 TB of KV read over the run plus
// ~1.2 TB of weights (1.19 GB once per step); prefill ~0.2 s at an H100/H200's GEMM rate.
TEST(PerfModel, NanoVllmWorkloadMatchesTheDesignFigures) {
  const BenchWorkload b = nano_vllm_bench_workload();
  std::vector<int> prompts, outputs;
  for (size_t i = 0; i < b.prompt_token_ids.size(); ++i) {
    prompts.push_back(static_cast<int>(b.prompt_token_ids[i].size()));
    outputs.push_back(b.max_tokens[i]);
  }
  const WorkloadCost w = workload_cost(qwen3_06b(), 1'190'000'000, 2, prompts, outputs, 256);
  EXPECT_EQ(w.prompt_tokens, 142827);
  EXPECT_EQ(w.output_tokens, 133966);
  EXPECT_NEAR(w.kv_read_bytes / 1e12, 13.9, 0.07);
  EXPECT_NEAR(w.weight_read_bytes / 1e12, 1.2, 0.05);
  const double prefill = prefill_floor_seconds(w, 790e12);
  EXPECT_GT(prefill, 0.1);
  EXPECT_LT(prefill, 0.3);
  // At the H100's datasheet 3.35 TB/s the decode floor is ~4.6 s.
  EXPECT_NEAR(decode_floor_seconds(w, 3.35e12), 4.5, 0.15);
}

}  // namespace
}  // namespace kestrel
