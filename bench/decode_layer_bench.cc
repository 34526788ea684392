// Where a single-stream decode step's time goes: the Qwen3-0.6B decoder layer at batch 1 as
// the model runs it (the four fused small-batch products and the fused decode attention),
// over 28 layers with their own weights and KV pages (so every byte comes from DRAM, as in a
// step), captured in one CUDA graph; then the same with one op left out at a time, and each
// op alone. An op's marginal cost (all minus all-but-it) is what it adds to the pipeline with
// programmatic dependent launch overlapping it with its neighbours, which profilers that
// serialise kernels (ncu) cannot show.
//
// Build: ninja decode_layer_bench (KESTREL_CUDA=ON); run: build/bench/decode_layer_bench
// [context keys, default 640] [unfused: the model's ops for steps of more than 8 tokens].
// Prints microseconds per layer and the bytes' floor at the device's measured copy rate.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "cuda_bench_util.h"
#include "core/error.h"

namespace kestrel {
namespace {

using namespace cuda_bench;

constexpr int kLayers = 28;
constexpr int kHidden = 1024, kInter = 3072, kHq = 16, kHkv = 8, kD = 128, kBlock = 16;
constexpr int kMaxPos = 4096;
constexpr float kEps = 1e-6f;

struct Layer {
  Tensor input_norm, qkv, q_norm, k_norm, o_proj, post_norm, gate_up, down;
  LayerKvCache kv;
};

enum Op { kQkv, kAttention, kOProj, kGateUp, kDown, kNumOps };
const char* const kOpNames[kNumOps] = {"qkv product (+ input norm)", "attention (+ q/k norm, rope)",
                                       "o_proj product (+ residual add)",
                                       "gate_up product (+ post norm)",
                                       "down product (+ silu_mul)"};

int run(int context, bool fused) {
  if (!cuda_device_available()) {
    std::printf("decode_layer_bench: no CUDA device\n");
    return 1;
  }
  auto backend = make_cuda_backend(0);
  auto& be = dynamic_cast<CudaBackend&>(*backend);
  std::printf("device: %s\ncontext: %d keys, %d layers, batch 1, %s ops\n", be.name().c_str(),
              context, kLayers, fused ? "fused" : "unfused");
  KS_CHECK(context >= 1 && context < kMaxPos, "context {} outside [1, {})", context, kMaxPos);

  // Small weights keep the residual stream finite over many replays.
  const int num_blocks = (context + kBlock - 1) / kBlock;
  std::vector<Layer> layers(kLayers);
  for (Layer& l : layers) {
    l.input_norm = random_bf16(be, Shape{kHidden}, 0.1f, true);
    l.qkv = random_bf16(be, Shape{(kHq + 2 * kHkv) * kD, kHidden}, 0.03f);
    l.q_norm = random_bf16(be, Shape{kD}, 0.1f, true);
    l.k_norm = random_bf16(be, Shape{kD}, 0.1f, true);
    l.o_proj = random_bf16(be, Shape{kHidden, kHq * kD}, 0.02f);
    l.post_norm = random_bf16(be, Shape{kHidden}, 0.1f, true);
    l.gate_up = random_bf16(be, Shape{2 * kInter, kHidden}, 0.03f);
    l.down = random_bf16(be, Shape{kHidden, kInter}, 0.02f);
    const Shape pages = be.kv_layout() == CudaKvLayout::kHeadMajor
                            ? Shape{num_blocks, kHkv, kBlock, kD}
                            : Shape{num_blocks, kBlock, kHkv, kD};
    l.kv = LayerKvCache{random_bf16(be, pages), random_bf16(be, pages)};
  }
  const Tensor cos_sin = rope_cos_sin(be, kMaxPos, kD);

  // One sequence whose new token is key `context - 1`; the split plan is made for kMaxPos
  // keys, as for a captured decode graph.
  std::vector<int32_t> table(num_blocks);
  for (int i = 0; i < num_blocks; ++i) table[i] = num_blocks - 1 - i;  // pages out of order
  AttentionMetadata meta;
  meta.num_tokens = meta.num_seqs = 1;
  meta.max_query_len = 1;
  meta.max_seq_len = kMaxPos;
  meta.block_size = kBlock;
  const int pos = context - 1;
  meta.positions = i32(be, {pos}, Shape{1});
  meta.slot_mapping = i32(be, {table[pos / kBlock] * kBlock + pos % kBlock}, Shape{1});
  meta.query_start_loc = i32(be, {0, 1}, Shape{2});
  meta.seq_lens = i32(be, {context}, Shape{1});
  meta.block_tables = i32(be, table, Shape{1, num_blocks});
  const AttentionShape shape{kHq, kHkv, kD};

  Tensor residual = random_bf16(be, Shape{1, kHidden});
  Tensor qkv = random_bf16(be, Shape{1, (kHq + 2 * kHkv) * kD});
  Tensor q = be.empty(DType::kBF16, Shape{1, kHq * kD});
  Tensor attn = random_bf16(be, Shape{1, kHq * kD});
  Tensor gate_up = random_bf16(be, Shape{1, 2 * kInter});
  const float scale = 1.0f / std::sqrt(float(kD));

  Tensor hidden = random_bf16(be, Shape{1, kHidden});
  Tensor act = random_bf16(be, Shape{1, kInter});
  // fused: the model's path for steps of <= 8 tokens (CausalLM::forward_fused); otherwise
  // its path for larger steps (add_rms_norm, linear, silu_mul: 8 kernels per layer).
  auto run_layers = [&](unsigned ops) {
    for (Layer& l : layers) {
      if (ops & (1u << kQkv)) {
        if (fused) {
          be.norm_linear(residual, l.input_norm, kEps, l.qkv, Tensor(), qkv);
        } else {
          be.add_rms_norm(hidden, residual, l.input_norm, kEps);
          be.linear(hidden, l.qkv, Tensor(), qkv);
        }
      }
      if (ops & (1u << kAttention)) {
        be.qk_norm_rope_attention(qkv, l.q_norm, l.k_norm, kEps, cos_sin, shape, meta, l.kv,
                                  scale, q, attn);
      }
      if (ops & (1u << kOProj)) {
        if (fused) {
          be.linear_add(attn, l.o_proj, Tensor(), residual);
        } else {
          be.linear(attn, l.o_proj, Tensor(), hidden);
        }
      }
      if (ops & (1u << kGateUp)) {
        if (fused) {
          be.norm_linear(residual, l.post_norm, kEps, l.gate_up, Tensor(), gate_up);
        } else {
          be.add_rms_norm(hidden, residual, l.post_norm, kEps);
          be.linear(hidden, l.gate_up, Tensor(), gate_up);
        }
      }
      if (ops & (1u << kDown)) {
        if (fused) {
          be.silu_mul_linear_add(gate_up, l.down, residual);
        } else {
          be.silu_mul(gate_up, act);
          be.linear(act, l.down, Tensor(), hidden);
        }
      }
    }
  };
  auto per_layer_us = [&](unsigned ops) {
    return time_ms(be, 4, [&] { run_layers(ops); }) * 1e3 / kLayers;
  };

  const double copy_rate = be.measure_copy_bandwidth(size_t(1) << 30);
  const double op_bytes[kNumOps] = {
      2.0 * layers[0].qkv.numel(),
      2.0 * 2.0 * context * kHkv * kD,  // K and V of every key
      2.0 * layers[0].o_proj.numel(), 2.0 * layers[0].gate_up.numel(),
      2.0 * layers[0].down.numel()};
  double layer_bytes = 0;
  for (double b : op_bytes) layer_bytes += b;
  const unsigned all = (1u << kNumOps) - 1;
  const double all_us = per_layer_us(all);
  std::printf("copy rate %.0f GB/s (bytes read + written)\n", copy_rate / 1e9);
  std::printf("%-36s %9.2f us per layer   floor %6.2f us (%.1f MB)   %5.1f%% of floor\n",
              "whole layer", all_us, layer_bytes / copy_rate * 1e6, layer_bytes / 1e6,
              100.0 * layer_bytes / copy_rate * 1e6 / all_us);
  std::printf("%-36s %9s %9s %9s %9s\n", "op", "marginal", "alone", "floor", "alone %");
  for (int op = 0; op < kNumOps; ++op) {
    const double without = per_layer_us(all & ~(1u << op));
    const double alone = per_layer_us(1u << op);
    const double floor_us = op_bytes[op] / copy_rate * 1e6;
    std::printf("%-36s %9.2f %9.2f %9.2f %8.1f%%\n", kOpNames[op], all_us - without, alone,
                floor_us, 100.0 * floor_us / alone);
  }
  return 0;
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  try {
    const int context = argc > 1 ? std::atoi(argv[1]) : 640;
    const bool unfused = argc > 2 && std::string(argv[2]) == "unfused";
    return kestrel::run(context, !unfused);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "decode_layer_bench: %s\n", e.what());
    return 1;
  }
}
