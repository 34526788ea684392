// The prompt-sized wgmma GEMM (gemm_ws.h) against cuBLASLt on Qwen3-0.6B's layer shapes at
// prompt-step sizes, and its SwiGLU epilogue against cuBLASLt's gate_up product followed by
// the silu_mul kernel (what the engine runs without it).
//
// Build: ninja gemm_ws_bench (KESTREL_CUDA=ON); run: build/bench/gemm_ws_bench [T ...]
// (default 512 2048 8192). Floor: the FLOPs at the GEMM rate measured first (cuBLASLt,
// 8192 x 8192 x 8192), or the bytes at the copy rate where longer. Each op is captured REPS
// times into a CUDA graph and the replay is timed (cuda_bench_util.h); inputs are random.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm/gemm.h"
#include "backend/cuda/gemm/gemm_ws.h"
#include "backend/cuda/launch.h"
#include "cuda_bench_util.h"

namespace kestrel {
namespace {

using namespace cuda_bench;

int run(const std::vector<int>& ts) {
  std::unique_ptr<Backend> owner = make_cuda_backend(0);
  auto& be = static_cast<CudaBackend&>(*owner);
  if (kernels::compute_capability() != 90) {
    std::printf("gemm_ws_bench: needs compute capability 9.0\n");
    return 0;
  }
  int device = 0, num_sms = 0;
  KS_CUDA_CHECK(cudaGetDevice(&device));
  KS_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
  GemmRunner lt(be.stream());
  lt.set_gemv_max_tokens(0);
  lt.set_wgmma_gemm(false);

  double rate = 0;
  {
    const int m = 8192;
    Tensor x = random_bf16(be, Shape{m, m});
    Tensor w = random_bf16(be, Shape{m, m});
    Tensor out = be.empty(DType::kBF16, Shape{m, m});
    const double ms = time_ms(be, 10, [&] {
      lt.run(x.data(), w.data(), nullptr, out.data(), CUDA_R_16BF, m, m, m);
    });
    const double ws_ms = time_ms(be, 10, [&] {
      kernels::gemm_ws(x.data(), w.data(), out.data(), m, m, m, kernels::GemmWsEpilogue::kStore,
                       num_sms, be.stream());
    });
    rate = 2.0 * m * double(m) * m / (ms * 1e-3);
    std::printf("GEMM rate, 8192^3: cuBLASLt %.3f ms (%.0f TFLOP/s), gemm_ws %.3f ms (%.0f TFLOP/s)\n",
                ms, rate / 1e12, ws_ms, 2.0 * m * double(m) * m / (ws_ms * 1e-3) / 1e12);
  }

  std::printf("%-24s %5s %10s %10s %10s %8s %8s\n", "shape (us per call)", "T", "cuBLASLt",
              "gemm_ws", "floor", "Lt %", "ws %");
  for (int t : ts) {
    for (const LayerShape& g : kLayerShapes) {
      Tensor x = random_bf16(be, Shape{t, g.k}, 1.0f);
      Tensor w = random_bf16(be, Shape{g.n, g.k}, 0.05f);
      Tensor out = be.empty(DType::kBF16, Shape{t, g.n});
      const double lt_ms = time_ms(be, 20, [&] {
        lt.run(x.data(), w.data(), nullptr, out.data(), CUDA_R_16BF, t, g.n, g.k);
      });
      const double ws_ms = time_ms(be, 20, [&] {
        kernels::gemm_ws(x.data(), w.data(), out.data(), t, g.n, g.k,
                         kernels::GemmWsEpilogue::kStore, num_sms, be.stream());
      });
      const double floor_ms = 2.0 * t * g.k * double(g.n) / rate * 1e3;
      std::printf("%-24s %5d %10.2f %10.2f %10.2f %7.1f%% %7.1f%%\n", g.name, t, lt_ms * 1e3,
                  ws_ms * 1e3, floor_ms * 1e3, 100 * floor_ms / lt_ms, 100 * floor_ms / ws_ms);
    }
    // The MLP's activation: cuBLASLt's [T, 2 I] product then silu_mul, against the fused one.
    const int k = 1024, inter = 3072;
    Tensor x = random_bf16(be, Shape{t, k}, 1.0f);
    Tensor w = random_bf16(be, Shape{2 * inter, k}, 0.05f);
    Tensor gate_up = be.empty(DType::kBF16, Shape{t, 2 * inter});
    Tensor act = be.empty(DType::kBF16, Shape{t, inter});
    const double unfused_ms = time_ms(be, 20, [&] {
      lt.run(x.data(), w.data(), nullptr, gate_up.data(), CUDA_R_16BF, t, 2 * inter, k);
      be.silu_mul(gate_up, act);
    });
    const double fused_ms = time_ms(be, 20, [&] {
      kernels::gemm_ws(x.data(), w.data(), act.data(), t, 2 * inter, k,
                       kernels::GemmWsEpilogue::kSiluMul, num_sms, be.stream());
    });
    const double floor_ms = 2.0 * t * k * double(2 * inter) / rate * 1e3;
    std::printf("%-24s %5d %10.2f %10.2f %10.2f %7.1f%% %7.1f%%  (cuBLASLt + silu_mul vs fused)\n",
                "gate_up + silu_mul", t, unfused_ms * 1e3, fused_ms * 1e3, floor_ms * 1e3,
                100 * floor_ms / unfused_ms, 100 * floor_ms / fused_ms);
  }
  return 0;
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  std::vector<int> ts;
  for (int i = 1; i < argc; ++i) {
    const int t = std::atoi(argv[i]);
    if (t <= 0) {
      std::fprintf(stderr, "gemm_ws_bench: '%s' is not a positive token count\n", argv[i]);
      return 2;
    }
    ts.push_back(t);
  }
  if (ts.empty()) ts = {512, 2048, 8192};
  try {
    return kestrel::run(ts);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gemm_ws_bench: %s\n", e.what());
    return 1;
  }
}
