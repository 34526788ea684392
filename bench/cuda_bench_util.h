// Helpers shared by the CUDA micro-benchmarks: random bf16 inputs (never zeros), int32
// uploads, and the timing of an op by CUDA-graph replay.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
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
inline Tensor random_bf16(Backend& be, Shape shape, float scale = 1.0f, bool around_one = false) {
  Tensor h = Tensor::host(DType::kBF16, shape);
  auto* p = h.data_as<uint16_t>();
  const float offset = around_one ? 1.0f : 0.0f;
  for (int64_t i = 0; i < h.numel(); ++i) p[i] = f32_to_bf16(offset + scale * next_uniform());
  return be.upload(h, DType::kBF16);
}

// One layer's K and V pages of random values: bf16, or with `fp8` e4m3 bytes of values in
// [-2, 2) with scales 1 for each of the `hkv` heads (backend.h, LayerKvCache).
inline LayerKvCache random_kv_pages(Backend& be, Shape pages, int hkv, bool fp8) {
  if (!fp8) return LayerKvCache{random_bf16(be, pages), random_bf16(be, pages)};
  auto bytes = [&] {
    Tensor h = Tensor::host(DType::kF8E4M3, pages);
    for (int64_t i = 0; i < h.numel(); ++i) h.data_as<uint8_t>()[i] = f32_to_e4m3(2.0f * next_uniform());
    return be.upload(h, DType::kF8E4M3);
  };
  const Shape quant{2, hkv};
  Tensor ones = Tensor::host(DType::kF32, quant), zeros = Tensor::host(DType::kF32, quant);
  Tensor counts = Tensor::host(DType::kI64, quant);
  for (int i = 0; i < 2 * hkv; ++i) {
    ones.data_as<float>()[i] = 1.0f;
    zeros.data_as<float>()[i] = 0.0f;
    counts.data_as<int64_t>()[i] = 0;
  }
  LayerKvCache kv{bytes(), bytes()};
  kv.scale = be.upload(ones, DType::kF32);
  kv.amax = be.upload(zeros, DType::kF32);
  kv.clamped = be.upload(counts, DType::kI64);
  return kv;
}

inline Tensor i32(Backend& be, const std::vector<int32_t>& v, Shape shape) {
  Tensor h = Tensor::host(DType::kI32, shape);
  std::copy(v.begin(), v.end(), h.data_as<int32_t>());
  return be.upload(h, DType::kI32);
}

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
