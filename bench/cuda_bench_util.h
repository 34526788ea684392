// Helpers shared by the CUDA micro-benchmarks: random bf16 inputs (never zeros), int32
// uploads, and the timing of an op by CUDA-graph replay.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "core/dtype.h"
#include "core/fp8.h"

namespace kestrel::cuda_bench {

constexpr int kReplays = 7;

inline uint64_t g_state = 0x9e3779b97f4a7c15ull;
inline float next_uniform() {  // xorshift64*, in [-1, 1)
  g_state ^= g_state >> 12;
  g_state ^= g_state << 25;
  g_state ^= g_state >> 27;
  const uint64_t r = g_state * 0x2545f4914f6cdd1dull;
  return static_cast<float>(r >> 40) / float(1 << 23) - 1.0f;
}

// Uniform in [-scale, scale), or in [1 - scale, 1 + scale) when `around_one` (norm weights).
inline Tensor random_bf16_host(Shape shape, float scale = 1.0f, bool around_one = false) {
  Tensor h = Tensor::host(DType::kBF16, shape);
  auto* p = h.data_as<uint16_t>();
  const float offset = around_one ? 1.0f : 0.0f;
  for (int64_t i = 0; i < h.numel(); ++i) p[i] = f32_to_bf16(offset + scale * next_uniform());
  return h;
}

inline Tensor random_bf16(Backend& be, Shape shape, float scale = 1.0f, bool around_one = false) {
  return be.upload(random_bf16_host(shape, scale, around_one), DType::kBF16);
}

// e4m3 bytes of values uniform in [-2, 2).
inline Tensor random_e4m3_host(Shape shape) {
  Tensor h = Tensor::host(DType::kF8E4M3, shape);
  for (int64_t i = 0; i < h.numel(); ++i) h.data_as<uint8_t>()[i] = f32_to_e4m3(2.0f * next_uniform());
  return h;
}

// One layer's K and V pages from be.allocate_kv_cache (`spec.num_layers` 1), random: bf16,
// or for an fp8 spec e4m3 bytes with the scales of 1 it was allocated with.
inline LayerKvCache random_kv_pages(CudaBackend& be, const KvCacheSpec& spec) {
  LayerKvCache kv = be.allocate_kv_cache(spec)[0];
  for (Tensor* pages : {&kv.k, &kv.v}) {
    const Tensor h = kv.fp8() ? random_e4m3_host(pages->shape()) : random_bf16_host(pages->shape());
    // Returns once pageable `h` is staged. Not copy_from_host: its pinned staging would grow
    // to the pages' size and stay.
    KS_CUDA_CHECK(cudaMemcpyAsync(pages->data(), h.data(), h.nbytes(), cudaMemcpyHostToDevice,
                                  be.stream()));
  }
  return kv;
}

inline Tensor i32(Backend& be, const std::vector<int32_t>& v, Shape shape) {
  Tensor h = Tensor::host(DType::kI32, shape);
  std::copy(v.begin(), v.end(), h.data_as<int32_t>());
  return be.upload(h, DType::kI32);
}

// A neox RoPE table [max_pos, d] as the model builds it (theta 1e6): cos in the first half
// of each row, sin in the second, uploaded.
inline Tensor rope_cos_sin(Backend& be, int max_pos, int d) {
  Tensor h = Tensor::host(DType::kF32, Shape{max_pos, d});
  for (int p = 0; p < max_pos; ++p) {
    for (int i = 0; i < d / 2; ++i) {
      const double a = p * std::pow(1e6, -2.0 * i / d);
      h.data_as<float>()[p * d + i] = static_cast<float>(std::cos(a));
      h.data_as<float>()[p * d + d / 2 + i] = static_cast<float>(std::sin(a));
    }
  }
  return be.upload(h, DType::kF32);
}

// Qwen3-0.6B's four layer products, [T, K] x [N, K]^T: what the GEMM benchmarks time.
struct LayerShape {
  const char* name;
  int k, n;
};
inline constexpr LayerShape kLayerShapes[] = {{"qkv_proj  K=1024 N=4096", 1024, 4096},
                                              {"o_proj    K=2048 N=1024", 2048, 1024},
                                              {"gate_up   K=1024 N=6144", 1024, 6144},
                                              {"down_proj K=3072 N=1024", 3072, 1024}};

// Milliseconds per call of `op`, from graph replays of `reps` calls.
inline double time_ms(CudaBackend& be, int reps, const std::function<void()>& op) {
  cudaStream_t s = be.stream();
  for (int i = 0; i < 2; ++i) op();  // warm-up: GEMM plans, module loading
  be.synchronize();
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  KS_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < reps; ++i) op();
  KS_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  KS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t a, b;
  KS_CUDA_CHECK(cudaEventCreate(&a));
  KS_CUDA_CHECK(cudaEventCreate(&b));
  KS_CUDA_CHECK(cudaGraphLaunch(exec, s));  // warm replay
  std::vector<double> ms;
  for (int r = 0; r < kReplays; ++r) {
    KS_CUDA_CHECK(cudaEventRecord(a, s));
    KS_CUDA_CHECK(cudaGraphLaunch(exec, s));
    KS_CUDA_CHECK(cudaEventRecord(b, s));
    KS_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    KS_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t / reps);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace kestrel::cuda_bench
