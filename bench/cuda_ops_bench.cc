// CUDA backend micro-benchmark: the device's copy bandwidth and bf16 GEMM rate (the two
// ceilings), then the production ops against the floor those ceilings give.
//
// Build: ninja cuda_ops_bench (configured with KESTREL_CUDA=ON); run: build/bench/cuda_ops_bench
// (`cuda_ops_bench decode`, `prefill`, `fp8`, `rope`, `gemm`, `wgmma`, `wgmma-8b` (Qwen3-8B
// products at TP=4 and 2, with gemm_ws and tuned cuBLASLt beside), `gemv-8b` (its batch-1
// fused products), `decode-tp` (its decode attention at TP ranks' heads) or `decode-fit`
// (decode attention's time against its bytes, beside copies of the same bytes): the
// ceilings and those rows only;
// `prefill-one ...`, `decode-one ...` and `wgmma-one ...`: one row, for profilers; `tma-encode`: the host time
// of encoding one TMA map). KESTREL_BENCH_ROWS=16,32,... replaces the rows (T) that `wgmma`
// and `wgmma-8b` sweep.
// Each op is captured REPS times into a CUDA graph (no launch gaps; this also checks that the
// op is graph-capturable) and the replay is timed with events; the median of 7 replays is
// reported. Inputs are random (never zeros).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "cuda_bench_util.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm/gemm.h"
#include "backend/cuda/gemm/gemm_ws.h"
#include "backend/cuda/gemm/gemv.h"
#include "backend/cuda/gemm/wgmma_gemm.h"
#include "backend/cuda/launch.h"
#include "backend/cuda/tma_map.h"
#include "core/dtype.h"
#include "core/error.h"

namespace kestrel {
namespace {

using namespace cuda_bench;

struct Ceilings {
  double bytes_per_s;
  double flops_per_s;
};

void row(const char* what, double ms, double floor_ms, const char* floor_kind) {
  std::printf("%-44s %9.3f ms   floor %8.3f ms (%s)   %5.1f%% of floor\n", what, ms, floor_ms,
              floor_kind, 100.0 * floor_ms / ms);
}

Ceilings measure_ceilings(CudaBackend& be) {
  const int64_t n = int64_t(1) << 29;  // 1 GiB of bf16 per buffer
  Tensor src = random_bf16(be, Shape{n});
  Tensor dst = be.empty(DType::kBF16, Shape{n});
  const double copy_ms = time_ms(be, 5, [&] {
    KS_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDeviceToDevice,
                                  be.stream()));
  });
  // The same copies issued directly (a graph's memcpy node may take another engine).
  cudaEvent_t e0, e1;
  KS_CUDA_CHECK(cudaEventCreate(&e0));
  KS_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<double> direct;
  for (int r = 0; r < kReplays; ++r) {
    KS_CUDA_CHECK(cudaEventRecord(e0, be.stream()));
    for (int i = 0; i < 5; ++i) {
      KS_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDeviceToDevice,
                                    be.stream()));
    }
    KS_CUDA_CHECK(cudaEventRecord(e1, be.stream()));
    KS_CUDA_CHECK(cudaEventSynchronize(e1));
    float t = 0;
    KS_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
    direct.push_back(t / 5);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(direct.begin(), direct.end());
  const double direct_ms = direct[direct.size() / 2];
  std::printf("%-44s %9.3f ms   %.0f GB/s (bytes read + written)\n", "D2D copy of 1 GiB (graph)",
              copy_ms, 2.0 * src.nbytes() / (copy_ms * 1e-3) / 1e9);
  std::printf("%-44s %9.3f ms   %.0f GB/s (bytes read + written)\n", "D2D copy of 1 GiB (stream)",
              direct_ms, 2.0 * src.nbytes() / (direct_ms * 1e-3) / 1e9);
  const double bw = 2.0 * src.nbytes() / (std::min(copy_ms, direct_ms) * 1e-3);
  // The engine's own ceiling (kestrel bench's floors): the same copies between fresh
  // allocations. On the H100 it read 2,585 GB/s after a bench run (then on constant bytes)
  // while the stream row above read 3,000 GB/s here; this row tells the method from the
  // context.
  std::printf("%-44s %9s      %.0f GB/s (Backend::measure_copy_bandwidth)\n",
              "D2D copy of 1 GiB (engine ceiling)", "", be.measure_copy_bandwidth(size_t(1) << 30) / 1e9);

  const int m = 8192;
  Tensor x = random_bf16(be, Shape{m, m});
  Tensor w = random_bf16(be, Shape{m, m});
  Tensor out = be.empty(DType::kBF16, Shape{m, m});
  const double gemm_ms = time_ms(be, 10, [&] { be.linear(x, w, Tensor(), out); });
  const double rate = 2.0 * m * double(m) * m / (gemm_ms * 1e-3);
  std::printf("%-44s %9.3f ms   %.0f TFLOP/s\n", "linear bf16 8192 x 8192 x 8192", gemm_ms,
              rate / 1e12);
  return {bw, rate};
}

// Sends every call of `runner` to cuBLASLt: the baseline our kernels are timed against.
void cublaslt_only(GemmRunner& runner) {
  runner.set_gemv_max_tokens(0);
  runner.set_wgmma_gemm(false);
}

int device_sms() {
  int device = 0, num_sms = 0;
  KS_CUDA_CHECK(cudaGetDevice(&device));
  KS_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
  return num_sms;
}

// Random bf16 weights [n, k] and copies of them totalling at least `bytes` (at least one):
// a benchmark rotating through them reads every call's weights from DRAM, as a decode step
// does (a model's weights never fit in L2).
std::vector<Tensor> cold_copies(CudaBackend& be, int64_t n, int64_t k, size_t bytes) {
  std::vector<Tensor> ws{random_bf16(be, Shape{n, k})};
  const size_t w_bytes = ws[0].nbytes();
  const size_t copies = std::max<size_t>(1, (bytes + w_bytes - 1) / w_bytes);
  while (ws.size() < copies) {
    ws.push_back(be.empty(DType::kBF16, Shape{n, k}));
    KS_CUDA_CHECK(cudaMemcpyAsync(ws.back().data(), ws[0].data(), w_bytes,
                                  cudaMemcpyDeviceToDevice, be.stream()));
  }
  return ws;
}

void bench_gemms(CudaBackend& be, const Ceilings& c) {
  // Qwen3-0.6B decode steps at batch 256 and 128: [T, K] x [N, K]^T.
  struct G {
    const char* name;
    int t, k, n;
    bool f32;
  };
  const G shapes[] = {{"qkv_proj   T=256 K=1024 N=4096", 256, 1024, 4096, false},
                      {"o_proj     T=256 K=2048 N=1024", 256, 2048, 1024, false},
                      {"gate_up    T=256 K=1024 N=6144", 256, 1024, 6144, false},
                      {"down_proj  T=256 K=3072 N=1024", 256, 3072, 1024, false},
                      {"lm_head    T=256 K=1024 N=151936 (F32)", 256, 1024, 151936, true},
                      // nano-vLLM's bench averages ~128 sequences per decode step
                      {"qkv_proj   T=128 K=1024 N=4096", 128, 1024, 4096, false},
                      {"o_proj     T=128 K=2048 N=1024", 128, 2048, 1024, false},
                      {"gate_up    T=128 K=1024 N=6144", 128, 1024, 6144, false},
                      {"down_proj  T=128 K=3072 N=1024", 128, 3072, 1024, false},
                      {"qkv_proj   T=1 K=1024 N=4096", 1, 1024, 4096, false}};
  // The same calls through cuBLASLt with its candidates timed (GemmRunner's optional tuning).
  GemmRunner timed(be.stream());
  timed.set_tune_algorithms(true);
  cublaslt_only(timed);
  for (const G& g : shapes) {
    Tensor x = random_bf16(be, Shape{g.t, g.k});
    Tensor w = random_bf16(be, Shape{g.n, g.k});
    Tensor out = be.empty(g.f32 ? DType::kF32 : DType::kBF16, Shape{g.t, g.n});
    const double ms = time_ms(be, 20, [&] { be.linear(x, w, Tensor(), out); });
    const double bytes = 2.0 * (double(g.t) * g.k + double(g.n) * g.k) + out.nbytes();
    const double flops = 2.0 * g.t * double(g.k) * g.n;
    const double mem_ms = bytes / c.bytes_per_s * 1e3, math_ms = flops / c.flops_per_s * 1e3;
    row(g.name, ms, std::max(mem_ms, math_ms), mem_ms > math_ms ? "bytes" : "flops");
    const double timed_ms = time_ms(be, 20, [&] {
      timed.run(x.data(), w.data(), nullptr, out.data(), g.f32 ? CUDA_R_32F : CUDA_R_16BF,
                    g.t, g.n, g.k);
    });
    std::printf("%-44s %9.3f ms   (cuBLASLt, candidates timed)\n", "", timed_ms);
  }
}

// Decode-sized GEMMs, T <= 16: the small-batch kernel's launcher (which linear() takes up to
// GemmRunner's threshold) against cuBLASLt (a runner with the kernel turned off). "cold": w
// rotates through copies totalling >= 192 MB (more than L2) so every call reads w from DRAM,
// as in a decode step (a model's weights never fit in L2); "hot": one w, L2-resident when it
// fits, like the rows above. The floor is the cold bytes (w + x + out) at the copy rate. Then
// the kernel's K split swept at T = 1, cold.
void bench_small_gemms(CudaBackend& be, const Ceilings& c) {
  struct G {
    const char* name;
    int k, n;
    bool f32;
  };
  const G shapes[] = {{"qkv_proj  K=1024 N=4096", 1024, 4096, false},
                      {"o_proj    K=2048 N=1024", 2048, 1024, false},
                      {"gate_up   K=1024 N=6144", 1024, 6144, false},
                      {"down_proj K=3072 N=1024", 3072, 1024, false},
                      {"lm_head   K=1024 N=151936 F32", 1024, 151936, true}};
  GemmRunner lt(be.stream());
  cublaslt_only(lt);
  const int num_sms = device_sms();
  {  // What a call costs beyond its bytes: a graph node's launch plus one round trip to memory.
    Tensor x = random_bf16(be, Shape{1, 64});
    Tensor w = random_bf16(be, Shape{8, 64});
    Tensor out = be.empty(DType::kBF16, Shape{1, 8});
    const double ms = time_ms(be, 20, [&] { be.linear(x, w, Tensor(), out); });
    std::printf("%-30s %9.2f us per call (launch and latency, no bandwidth)\n",
                "gemv T=1 K=64 N=8", ms * 1e3);
  }
  std::printf("%-30s %3s %9s %9s %9s %9s %9s %7s %7s\n", "shape (us per call)", "T", "gemv",
              "cuBLASLt", "gemv hot", "Lt hot", "floor", "gemv %", "Lt %");
  for (const G& g : shapes) {
    const std::vector<Tensor> ws = cold_copies(be, g.n, g.k, size_t(192) << 20);
    const size_t w_bytes = ws[0].nbytes();
    const int copies = static_cast<int>(ws.size());
    const int reps = std::max(20, copies);
    const cudaDataType_t out_type = g.f32 ? CUDA_R_32F : CUDA_R_16BF;
    for (int t : {1, 2, 4, 8, 16}) {
      Tensor x = random_bf16(be, Shape{t, g.k});
      Tensor out = be.empty(g.f32 ? DType::kF32 : DType::kBF16, Shape{t, g.n});
      auto cold = [&](const std::function<void(const Tensor&)>& f) {
        int i = 0;
        return time_ms(be, reps, [&] { f(ws[i++ % copies]); });
      };
      auto gemv = [&](const Tensor& w) {
        kernels::gemv(x.data(), w.data(), nullptr, out.data(), g.f32, t, g.n, g.k, num_sms,
                      be.stream());
      };
      auto cublaslt = [&](const Tensor& w) {
        lt.run(x.data(), w.data(), nullptr, out.data(), out_type, t, g.n, g.k);
      };
      const double gemv_ms = cold(gemv), lt_ms = cold(cublaslt);
      const double gemv_hot = time_ms(be, 20, [&] { gemv(ws[0]); });
      const double lt_hot = time_ms(be, 20, [&] { cublaslt(ws[0]); });
      const double bytes = double(w_bytes) + 2.0 * t * g.k + double(out.nbytes());
      const double floor_ms = bytes / c.bytes_per_s * 1e3;
      std::printf("%-30s %3d %9.2f %9.2f %9.2f %9.2f %9.2f %6.1f%% %6.1f%%\n", g.name, t,
                  gemv_ms * 1e3, lt_ms * 1e3, gemv_hot * 1e3, lt_hot * 1e3, floor_ms * 1e3,
                  100.0 * floor_ms / gemv_ms, 100.0 * floor_ms / lt_ms);
    }
    Tensor x = random_bf16(be, Shape{1, g.k});
    Tensor out = be.empty(g.f32 ? DType::kF32 : DType::kBF16, Shape{1, g.n});
    std::printf("%-30s   k_split sweep, T=1 cold (us):", g.name);
    for (int split : {1, 2, 4, 8, 16}) {
      int i = 0;
      const double ms = time_ms(be, reps, [&] {
        kernels::gemv(x.data(), ws[i++ % copies].data(), nullptr, out.data(), g.f32, 1, g.n, g.k,
                      num_sms, be.stream(), split);
      });
      std::printf(" %d: %.2f", split, ms * 1e3);
    }
    std::printf("  (default %d)\n", kernels::gemv_k_split(1, g.n, g.k, num_sms));
  }
}

// The wgmma decode-step GEMM (wgmma_gemm.h) against cuBLASLt on the Qwen3-0.6B layer shapes,
// w cold (rotating through >= 192 MB of copies, as in a decode step), x hot. Floor: the cold
// bytes at the copy rate or the FLOPs at the GEMM rate, whichever is longer. Then every
// token tile / K split ("tile/split: us").
void bench_wgmma_gemms(CudaBackend& be, const Ceilings& c,
                       const std::vector<LayerShape>& shapes = {std::begin(kLayerShapes),
                                                                std::end(kLayerShapes)},
                       std::vector<int> ts = {16, 32, 64, 96, 128, 192, 256}) {
  if (const char* env = std::getenv("KESTREL_BENCH_ROWS")) {
    ts.clear();
    for (const char* p = env; *p != '\0';) {
      char* end = nullptr;
      const long t = std::strtol(p, &end, 10);
      if (end == p || t < 1 || t > kernels::kWgmmaGemmMaxTokens) {
        std::printf("KESTREL_BENCH_ROWS: '%s' is not a list of rows in 1..%d\n", env,
                    kernels::kWgmmaGemmMaxTokens);
        return;
      }
      ts.push_back(static_cast<int>(t));
      p = *end == ',' ? end + 1 : end;
    }
  }
  if (kernels::compute_capability() != 90) {
    std::printf("wgmma GEMM: needs compute capability 9.0\n");
    return;
  }
  GemmRunner lt(be.stream());
  cublaslt_only(lt);
  const int num_sms = device_sms();
  // Plans as rows:tile/split; the 128-row shape first, then the 64-row (deep ring) one.
  const std::vector<std::pair<int, std::vector<int>>> shapes_of_cta = {{128, {64, 128}},
                                                                       {64, {32, 64, 128}}};
  std::printf("resident CTAs (rows:tile/split: CTAs):");
  for (const auto& [rows, tiles] : shapes_of_cta) {
    for (int tile : tiles) {
      for (int split = 1; split <= kernels::kWgmmaGemmMaxSplit; split *= 2) {
        std::printf(" %d:%d/%d: %d", rows, tile, split,
                    kernels::wgmma_gemm_resident_ctas(tile, split, rows));
      }
    }
  }
  std::printf("\n");
  GemmRunner timed(be.stream());  // cuBLASLt with its candidates timed
  timed.set_tune_algorithms(true);
  cublaslt_only(timed);
  std::printf("%-26s %3s %9s %9s %9s %9s %9s %7s %7s  %s\n", "shape (us per call)", "T",
              "cuBLASLt", "Lt timed", "Lt w hot", "gemm_ws", "floor", "Lt %", "ws %",
              "wgmma default plan; sweep tile/split: us");
  for (const LayerShape& g : shapes) {
    const std::vector<Tensor> ws = cold_copies(be, g.n, g.k, size_t(192) << 20);
    const size_t w_bytes = ws[0].nbytes();
    const int copies = static_cast<int>(ws.size());
    const int reps = std::max(20, copies);
    for (int t : ts) {
      Tensor x = random_bf16(be, Shape{t, g.k});
      Tensor out = be.empty(DType::kBF16, Shape{t, g.n});
      auto cold = [&](const std::function<void(const Tensor&)>& f) {
        int i = 0;
        return time_ms(be, reps, [&] { f(ws[i++ % copies]); });
      };
      auto wgmma = [&](kernels::WgmmaGemmPlan plan) {
        return cold([&](const Tensor& w) {
          kernels::wgmma_gemm(x.data(), w.data(), out.data(), t, g.n, g.k, num_sms, be.stream(),
                              plan);
        });
      };
      const double lt_ms = cold([&](const Tensor& w) {
        lt.run(x.data(), w.data(), nullptr, out.data(), CUDA_R_16BF, t, g.n, g.k);
      });
      const double timed_ms = cold([&](const Tensor& w) {
        timed.run(x.data(), w.data(), nullptr, out.data(), CUDA_R_16BF, t, g.n, g.k);
      });
      // w in L2 (the same copy every call): what weights already in L2 would give cuBLASLt.
      const double hot_ms = time_ms(be, reps, [&] {
        lt.run(x.data(), ws[0].data(), nullptr, out.data(), CUDA_R_16BF, t, g.n, g.k);
      });
      const bool ws_ok = kernels::gemm_ws_supported(t, g.n, g.k, x.data(), ws[0].data(),
                                                    out.data());
      const double ws_ms = !ws_ok ? 0 : cold([&](const Tensor& w) {
        kernels::gemm_ws(x.data(), w.data(), out.data(), t, g.n, g.k,
                         kernels::GemmWsEpilogue::kStore, num_sms, be.stream());
      });
      const kernels::WgmmaGemmPlan def = kernels::wgmma_gemm_plan(t, g.n, g.k, num_sms);
      const double bytes = double(w_bytes) + 2.0 * t * g.k + 2.0 * t * g.n;
      const double floor_ms = std::max(bytes / c.bytes_per_s, 2.0 * t * g.k * double(g.n) /
                                                                  c.flops_per_s) * 1e3;
      std::printf("%-26s %3d %9.2f %9.2f %9.2f %9.2f %9.2f %6.1f%% %6.1f%%  ", g.name, t,
                  lt_ms * 1e3, timed_ms * 1e3, hot_ms * 1e3, ws_ms * 1e3, floor_ms * 1e3,
                  100.0 * floor_ms / lt_ms, ws_ok ? 100.0 * floor_ms / ws_ms : 0.0);
      if (!kernels::wgmma_gemm_supported(t, g.n, g.k, x.data(), ws[0].data(), out.data())) {
        std::printf("(wgmma: unsupported)\n");
        continue;
      }
      const kernels::WgmmaGemmPlan deep = kernels::wgmma_gemm_deep_plan(t, g.n, g.k, num_sms);
      std::printf("%.2f (128:%d/%d); deep %.2f (64:%d/%d);", wgmma(def) * 1e3, def.tile_tokens,
                  def.split, wgmma(deep) * 1e3, deep.tile_tokens, deep.split);
      for (const auto& [rows, tiles] : shapes_of_cta) {
        for (int tile : tiles) {
          for (int split = 1; split <= kernels::kWgmmaGemmMaxSplit; split *= 2) {
            if ((g.k / kernels::kWgmmaGemmStepK) % split != 0) continue;
            std::printf(" %d:%d/%d: %.2f", rows, tile, split, wgmma({tile, split, rows}) * 1e3);
          }
        }
      }
      std::printf("\n");
    }
  }
}

// A batch of sequences of lens[b] keys each, the last `q_len` of them new, on pages scattered
// as after a while of serving (or in order): the metadata and the pages it needs.
struct PagedBatch {
  AttentionMetadata meta;
  int num_blocks = 0;
  int64_t total_keys = 0;
  std::vector<int32_t> tables;  // host copy, [num_seqs, blocks_per_seq]
  int blocks_per_seq = 0;
};

PagedBatch paged_batch(CudaBackend& be, const std::vector<int32_t>& lens, int q_len,
                       bool scatter_pages, bool general, bool longest_first, int bs) {
  PagedBatch pb;
  const int num_seqs = static_cast<int>(lens.size());
  const int max_len = *std::max_element(lens.begin(), lens.end());
  pb.blocks_per_seq = (max_len + bs - 1) / bs;
  for (int32_t len : lens) pb.num_blocks += (len + bs - 1) / bs;
  std::vector<int32_t> perm(pb.num_blocks);
  for (int i = 0; i < pb.num_blocks; ++i) perm[i] = i;
  for (int i = pb.num_blocks - 1; scatter_pages && i > 0; --i) {
    std::swap(perm[i], perm[static_cast<int>((next_uniform() + 1.0f) * 0.5f * i)]);
  }
  std::vector<int32_t> qsl{0};
  pb.tables.assign(size_t(num_seqs) * pb.blocks_per_seq, 0);
  for (int b = 0, next = 0; b < num_seqs; ++b) {
    qsl.push_back(qsl.back() + q_len);
    for (int i = 0; i < (lens[b] + bs - 1) / bs; ++i) {
      pb.tables[size_t(b) * pb.blocks_per_seq + i] = perm[next++];
    }
    pb.total_keys += lens[b];
  }
  AttentionMetadata& meta = pb.meta;
  meta.num_tokens = qsl.back();
  meta.num_seqs = num_seqs;
  meta.max_query_len = general ? 0 : q_len;
  meta.max_seq_len = max_len;
  meta.block_size = bs;
  meta.query_start_loc = i32(be, qsl, Shape{num_seqs + 1});
  meta.seq_lens = i32(be, lens, Shape{num_seqs});
  meta.block_tables = i32(be, pb.tables, Shape{num_seqs, pb.blocks_per_seq});
  if (longest_first) {
    std::vector<int32_t> order(num_seqs);
    for (int b = 0; b < num_seqs; ++b) order[b] = b;
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t x, int32_t y) { return lens[x] > lens[y]; });
    meta.seq_order = i32(be, order, Shape{num_seqs});
  }
  return pb;
}

// Attention over sequences of lens[b] keys each, the last `q_len` of them new.
// `general`: withhold the max_query_len hint, so decodes and prefills take the general
// CUDA-core kernel (the decode and tensor-core kernels' baseline, measured in the same run).
// `longest_first`: pass the runner's seq_order (longest sequence first). `fp8`: an e4m3
// cache (1-byte K/V; the floor counts those bytes).
void bench_attention_lens(CudaBackend& be, const Ceilings& c, const char* name,
                          const std::vector<int32_t>& lens, int q_len, bool scatter_pages = true,
                          bool general = false, bool longest_first = false, bool fp8 = false,
                          int bs = 16, int hq = 16, int hkv = 8) {
  const int d = 128;
  const PagedBatch pb = paged_batch(be, lens, q_len, scatter_pages, general, longest_first, bs);
  const AttentionMetadata& meta = pb.meta;
  const int64_t t = meta.num_tokens;
  LayerKvCache kv = random_kv_pages(
      be, KvCacheSpec{1, pb.num_blocks, bs, hkv, d, fp8 ? DType::kF8E4M3 : DType::kBF16});
  Tensor q = random_bf16(be, Shape{t, hq * d});
  Tensor out = be.empty(DType::kBF16, Shape{t, hq * d});
  const AttentionShape shape{hq, hkv, d};
  const double ms = time_ms(be, 10, [&] {
    be.attention(q, kv, shape, meta, 1.0f / std::sqrt(float(d)), out);
  });
  // The keys' K and V rows (not the pages' unused tails), q and out.
  const double bytes = 2.0 * pb.total_keys * hkv * d * (fp8 ? 1 : 2) + q.nbytes() + out.nbytes();
  // Causal: query i of a sequence sees len - q_len + i + 1 keys; QK and PV are 2 D flops each.
  double keys = 0;
  for (int32_t len : lens) {
    for (int i = 0; i < q_len; ++i) keys += len - q_len + i + 1;
  }
  const double flops = 4.0 * d * keys * hq;
  const double mem_ms = bytes / c.bytes_per_s * 1e3, math_ms = flops / c.flops_per_s * 1e3;
  row(name, ms, std::max(mem_ms, math_ms), mem_ms > math_ms ? "bytes" : "tensor flops");
  std::printf("%-44s %9s      %.0f GB/s achieved, %.1f TFLOP/s\n", "", "", bytes / (ms * 1e-3) / 1e9,
              flops / (ms * 1e-3) / 1e12);
}

// A decode step's qk_norm_rope_attention (Qwen3-0.6B's heads, q/k norms, num_seqs sequences
// whose new token is key ctx): the fused tensor-core kernel, and the store kernel followed by
// the plain one (KESTREL_DECODE_MMA_ROPE=0), in the same run. Floor: the
// cached keys' K/V, qkv read once, the output and the new K/V written.
void bench_rope_attention(CudaBackend& be, const Ceilings& c, int num_seqs, int ctx, bool fp8) {
  const int hq = 16, hkv = 8, d = 128, bs = 16, max_pos = 4096;
  const PagedBatch pb = paged_batch(be, std::vector<int32_t>(num_seqs, ctx), 1, true, false, true, bs);
  LayerKvCache kv = random_kv_pages(
      be, KvCacheSpec{1, pb.num_blocks, bs, hkv, d, fp8 ? DType::kF8E4M3 : DType::kBF16});
  AttentionMetadata meta = pb.meta;
  std::vector<int32_t> positions(num_seqs, ctx - 1), slots(num_seqs);
  for (int b = 0; b < num_seqs; ++b) {
    slots[b] = pb.tables[size_t(b) * pb.blocks_per_seq + (ctx - 1) / bs] * bs + (ctx - 1) % bs;
  }
  meta.positions = i32(be, positions, Shape{num_seqs});
  meta.slot_mapping = i32(be, slots, Shape{num_seqs});
  const Tensor cos_sin = rope_cos_sin(be, max_pos, d);
  const Tensor qkv = random_bf16(be, Shape{num_seqs, (hq + 2 * hkv) * d});
  const Tensor qn = random_bf16(be, Shape{d}, 0.5f, true), kn = random_bf16(be, Shape{d}, 0.5f, true);
  Tensor q = be.empty(DType::kBF16, Shape{num_seqs, hq * d});
  Tensor out = be.empty(DType::kBF16, Shape{num_seqs, hq * d});
  const AttentionShape shape{hq, hkv, d};
  auto op = [&] {
    be.qk_norm_rope_attention(qkv, qn, kn, 1e-6f, cos_sin, shape, meta, kv, 1.0f / std::sqrt(float(d)), q, out);
  };
  const int elem = fp8 ? 1 : 2;
  const double bytes = 2.0 * (pb.total_keys - num_seqs) * hkv * d * elem + qkv.nbytes() +
                       out.nbytes() + 2.0 * num_seqs * hkv * d * elem;
  const double floor_ms = bytes / c.bytes_per_s * 1e3;
  for (const char* env : {"1000000", "0"}) {  // fused at any batch size, or never
    setenv("KESTREL_DECODE_MMA_ROPE", env, 1);
    const double ms = time_ms(be, 10, op);
    const std::string name = std::to_string(num_seqs) + " x " + std::to_string(ctx) +
                             (fp8 ? " fp8" : " bf16") + (env[0] == '0' ? ", store kernel first" : ", fused");
    row(name.c_str(), ms, floor_ms, "bytes");
  }
  unsetenv("KESTREL_DECODE_MMA_ROPE");
}

void bench_attention(CudaBackend& be, const Ceilings& c, const char* name, int num_seqs, int ctx,
                     int q_len, bool scatter_pages = true, bool general = false, bool fp8 = false) {
  bench_attention_lens(be, c, name, std::vector<int32_t>(num_seqs, ctx), q_len, scatter_pages,
                       general, false, fp8);
}

// Qwen3-8B's decode attention as one rank of TP = 1, 2 and 4 holds it (32 / 8 query / KV
// heads, a half, a quarter): 256 sequences of 1,024 keys and a nano-vLLM-like step of 256
// mixed lengths (100..2,048 keys), in batch order and longest first. At TP = 4 the engine's
// kernel streams at ~71% of the copy rate where TP = 1's reaches ~90% (docs/parallel.md).
void bench_decode_attention_tp(CudaBackend& be, const Ceilings& c) {
  std::vector<int32_t> mixed(256);
  uint64_t state = 777;
  for (int32_t& len : mixed) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    len = 100 + static_cast<int32_t>((state >> 33) % 1949);
  }
  for (int tp : {1, 2, 4}) {
    const int hq = 32 / tp, hkv = 8 / tp;
    const std::string tag = "tp" + std::to_string(tp) + " (Hq " + std::to_string(hq) + ", Hkv " +
                            std::to_string(hkv) + ") ";
    bench_attention_lens(be, c, (tag + "256 x 1024").c_str(), std::vector<int32_t>(256, 1024), 1,
                         true, false, false, false, 16, hq, hkv);
    bench_attention_lens(be, c, (tag + "256 mixed").c_str(), mixed, 1, true, false, false, false,
                         16, hq, hkv);
    bench_attention_lens(be, c, (tag + "256 mixed, longest first").c_str(), mixed, 1, true, false,
                         true, false, 16, hq, hkv);
  }
}

// Milliseconds per device-to-device copy moving `bytes` in all (half read, half written), timed
// as the ops are: what the copy-rate floor's own method reaches at that size.
double copy_ms_moving(CudaBackend& be, double bytes) {
  const int64_t n = int64_t(bytes / 4);  // bf16 elements per buffer: bytes / 2 each way
  Tensor src = random_bf16(be, Shape{n});
  Tensor dst = be.empty(DType::kBF16, Shape{n});
  return time_ms(be, 10, [&] {
    KS_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDeviceToDevice,
                                  be.stream()));
  });
}

// Decode attention's time against its bytes at a TP=4 rank's heads (Hq 8, Hkv 2) and at
// TP=1's (32, 8), over batch sizes that fill a fraction of a wave to several waves (3 CTAs an
// SM), each beside a copy moving the same bytes: whether the time over the copy-rate floor
// is a cost per launch, per wave or per byte.
void bench_decode_fit(CudaBackend& be, const Ceilings& c) {
  struct Row {
    int hq, hkv, seqs, keys;
  };
  const Row rows[] = {{8, 2, 66, 1024},  {8, 2, 132, 1024}, {8, 2, 198, 1024}, {8, 2, 256, 1024},
                      {8, 2, 396, 1024}, {8, 2, 512, 1024}, {8, 2, 792, 1024}, {8, 2, 256, 256},
                      {8, 2, 256, 512},  {8, 2, 256, 2048}, {8, 2, 256, 4096}, {32, 8, 64, 1024},
                      {32, 8, 256, 1024}};
  for (const Row& r : rows) {
    const std::string tag = "Hq " + std::to_string(r.hq) + " Hkv " + std::to_string(r.hkv) + ", " +
                            std::to_string(r.seqs) + " x " + std::to_string(r.keys);
    bench_attention_lens(be, c, tag.c_str(), std::vector<int32_t>(r.seqs, r.keys), 1, true, false,
                         false, false, 16, r.hq, r.hkv);
    const double kv_bytes = 2.0 * r.seqs * r.keys * r.hkv * 128 * 2;
    const double ms = copy_ms_moving(be, kv_bytes);
    std::printf("%-44s %9.3f ms   (%.0f GB/s)\n", "  a copy moving the K/V bytes", ms,
                kv_bytes / (ms * 1e-3) / 1e9);
  }
}

// The decode attention rows: uniform batches, nano-vLLM's mixed lengths, a single stream.
void bench_decode_attention(CudaBackend& be, const Ceilings& c, bool fp8 = false) {
  bench_attention(be, c, "decode 256 seqs x 1024 ctx", 256, 1024, 1, true, false, fp8);
  bench_attention(be, c, "decode 128 seqs x 2048 ctx", 128, 2048, 1, true, false, fp8);
  // A decode step of nano-vLLM's benchmark: ~128 sequences of 100..2048 keys (fixed seed).
  std::vector<int32_t> mixed(128);
  uint64_t state = 12345;
  for (int32_t& len : mixed) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    len = 100 + static_cast<int32_t>((state >> 33) % 1949);
  }
  bench_attention_lens(be, c, "decode 128 seqs x 100..2048 ctx (mixed)", mixed, 1, true, false,
                       false, fp8);
  bench_attention_lens(be, c, "the same, longest sequence first", mixed, 1, true, false, true, fp8);
  // A nano-vLLM decode step's shape (256 sequences of ~100..1,100 keys, ~560 on average), and
  // uniform batches of short contexts: what each CTA's fixed cost weighs against its keys.
  std::vector<int32_t> nano(256);
  for (int32_t& len : nano) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    len = 100 + static_cast<int32_t>((state >> 33) % 1001);
  }
  bench_attention_lens(be, c, "decode 256 seqs x 100..1100 ctx, longest first", nano, 1, true,
                       false, true, fp8);
  for (int ctx : {128, 256, 560}) {
    const std::string name = "decode 256 seqs x " + std::to_string(ctx) + " ctx";
    bench_attention(be, c, name.c_str(), 256, ctx, 1, true, false, fp8);
  }
  bench_attention(be, c, "decode 64 seqs x 1024 ctx", 64, 1024, 1, true, false, fp8);
  bench_attention(be, c, "decode 16 seqs x 4096 ctx", 16, 4096, 1, true, false, fp8);
  bench_attention(be, c, "decode 1 seq x 640 ctx", 1, 640, 1, true, false, fp8);
}

// The prefill attention rows, each on the two sm_90a wgmma kernels (where the device runs
// them) and on the mma.sync kernel (KESTREL_PREFILL_SM90=0), in the same run.
void bench_prefill_attention(CudaBackend& be, const Ceilings& c) {
  struct Row {
    const char* name;
    int num_seqs, ctx, q_len;
    bool scatter_pages = true;
  };
  // Scattered pages take the ws kernel's cp.async path; pages in order (a fresh cache, as in
  // the prefill workload) its TMA boxes.
  const Row rows[] = {
      {"prefill 1 seq x 512 new", 1, 512, 512},
      {"prefill 1 seq x 8192 new", 1, 8192, 8192},
      {"prefill 4 seqs x 1024 new", 4, 1024, 1024},
      {"prefill 8 seqs x 1024 new", 8, 1024, 1024},
      {"prefill 32 seqs x 1024 new", 32, 1024, 1024},
      {"prefill 32 seqs x 512 new after 512 cached", 32, 1024, 512},
      {"prefill 1 seq x 8192 new, pages in order", 1, 8192, 8192, false},
      {"prefill 8 seqs x 1024 new, pages in order", 8, 1024, 1024, false},  // a workload step
  };
  const struct {
    const char* env;
    const char* title;
  } kernels[] = {
      {"1", "warp-specialised wgmma kernel (the default) where the device has it:"},
      {"step", "in-step wgmma kernel (KESTREL_PREFILL_SM90=step) where the device has it:"},
      {"0", "mma.sync kernel (KESTREL_PREFILL_SM90=0):"}};
  for (const auto& kernel : kernels) {
    setenv("KESTREL_PREFILL_SM90", kernel.env, 1);
    std::printf("  %s\n", kernel.title);
    for (const Row& r : rows) {
      bench_attention(be, c, r.name, r.num_seqs, r.ctx, r.q_len, r.scatter_pages);
    }
  }
  unsetenv("KESTREL_PREFILL_SM90");
}

// The batch-1 products of a decode step as the fused small-step ops run them (norm_linear for
// qkv, gate_up and the LM head, linear and linear_add for o_proj, silu_mul_linear for down),
// on Qwen3-8B's shapes at TP = 1, 2 and 4, w cold (rotating through >= 256 MB of copies).
// Floor: w's bytes at the copy rate.
void bench_gemv_8b(CudaBackend& be, const Ceilings& c) {
  struct G {
    const char* name;
    int op;  // 0 norm_linear, 1 linear, 2 silu_mul_linear, 3 norm_linear to fp32 (LM head)
    int k, n;
  };
  const G shapes[] = {{"tp1 qkv     K=4096 N=6144", 0, 4096, 6144},
                      {"tp1 o       K=4096 N=4096", 1, 4096, 4096},
                      {"tp2 qkv     K=4096 N=3072", 0, 4096, 3072},
                      {"tp2 o       K=2048 N=4096", 1, 2048, 4096},
                      {"tp2 gate_up K=4096 N=12288", 0, 4096, 12288},
                      {"tp2 down    K=6144 N=4096", 2, 6144, 4096},
                      {"tp2 lm_head K=4096 N=75968 F32", 3, 4096, 75968},
                      {"tp4 qkv     K=4096 N=1536", 0, 4096, 1536},
                      {"tp4 o       K=1024 N=4096", 1, 1024, 4096},
                      {"tp4 gate_up K=4096 N=6144", 0, 4096, 6144},
                      {"tp4 down    K=3072 N=4096", 2, 3072, 4096},
                      {"0.6b lm_head K=1024 N=151936 F32", 3, 1024, 151936}};
  std::printf("%-32s %9s %9s %7s\n", "shape, T = 1 (us per call)", "fused", "floor", "of floor");
  for (const G& g : shapes) {
    const std::vector<Tensor> ws = cold_copies(be, g.n, g.k, size_t(256) << 20);
    const size_t w_bytes = ws[0].nbytes();
    const int copies = static_cast<int>(ws.size());
    Tensor x = random_bf16(be, Shape{1, g.op == 2 ? 2 * g.k : g.k});
    Tensor norm = random_bf16(be, Shape{g.k}, 0.5f, true);
    Tensor out = be.empty(g.op == 3 ? DType::kF32 : DType::kBF16, Shape{1, g.n});
    int i = 0;
    const double ms = time_ms(be, std::max(20, copies), [&] {
      const Tensor& w = ws[i++ % copies];
      switch (g.op) {
        case 0: case 3: be.norm_linear(x, norm, 1e-6f, w, Tensor(), out); break;
        case 1: be.linear(x, w, Tensor(), out); break;
        default: be.silu_mul_linear(x, w, out); break;
      }
    });
    const double floor_ms = double(w_bytes) / c.bytes_per_s * 1e3;
    std::printf("%-32s %9.2f %9.2f %6.1f%%\n", g.name, ms * 1e3, floor_ms * 1e3,
                100.0 * floor_ms / ms);
    if (g.op == 1) {  // the single-device o_proj: the product added into the residual
      int j = 0;
      const double add_ms = time_ms(be, std::max(20, copies), [&] {
        be.linear_add(x, ws[j++ % copies], Tensor(), out);
      });
      std::printf("%-32s %9.2f %9.2f %6.1f%%\n", "  (linear_add)", add_ms * 1e3, floor_ms * 1e3,
                  100.0 * floor_ms / add_ms);
    }
  }
}

// section: "" (everything), "decode" (the decode attention rows), "prefill" (the prefill
// attention rows), "fp8" (decode and prefill attention on an e4m3 cache), "rope" (a decode
// step's RoPE/store and attention, fused and not), "gemm" (the GEMM rows) or "wgmma" (the
// decode-step GEMM kernel against cuBLASLt).
int run(const std::string& section) {
  if (!cuda_device_available()) {
    std::printf("cuda_ops_bench: no CUDA device\n");
    return 1;
  }
  auto backend = make_cuda_backend(0, CudaKvLayout::kTokenMajor);  // the rows say "token-major"
  auto& be = dynamic_cast<CudaBackend&>(*backend);
  std::printf("device: %s\n\n-- ceilings --\n", be.name().c_str());
  const Ceilings c = measure_ceilings(be);
  if (section == "decode") {
    std::printf("\n-- decode attention, Hq 16, Hkv 8, D 128, block 16, token-major pages --\n");
    bench_decode_attention(be, c);
    return 0;
  }
  if (section == "fp8") {
    std::printf("\n-- decode attention, e4m3 K/V cache, Hq 16, Hkv 8, D 128, block 16 --\n");
    bench_decode_attention(be, c, true);
    std::printf("\n-- prefill attention (mma.sync kernel), e4m3 K/V cache --\n");
    for (int n : {1, 8, 32}) {
      const std::string name = "prefill " + std::to_string(n) + " x 1024 new";
      bench_attention(be, c, name.c_str(), n, 1024, 1024, true, false, true);
    }
    bench_attention(be, c, "prefill 1 seq x 8192 new", 1, 8192, 8192, true, false, true);
    bench_attention(be, c, "decode 256 x 1024, pages in order", 256, 1024, 1, false, false, true);
    backend.reset();
    auto head_major = make_cuda_backend(0, CudaKvLayout::kHeadMajor);
    auto& hm = dynamic_cast<CudaBackend&>(*head_major);
    std::printf("\n-- the same, head-major pages --\n");
    bench_decode_attention(hm, c, true);
    bench_attention(hm, c, "decode 256 x 1024, pages in order", 256, 1024, 1, false, false, true);
    std::printf("  bf16:\n");
    bench_attention(hm, c, "decode 256 seqs x 1024 ctx", 256, 1024, 1);
    return 0;
  }
  if (section == "wgmma") {
    std::printf("\n-- decode-step GEMMs: wgmma kernel vs cuBLASLt --\n");
    bench_wgmma_gemms(be, c);
    return 0;
  }
  if (section == "decode-tp") {
    std::printf("\n-- Qwen3-8B decode attention at a TP rank's heads, D 128, block 16, token-major --\n");
    bench_decode_attention_tp(be, c);
    return 0;
  }
  if (section == "decode-fit") {
    std::printf("\n-- decode attention time against bytes, D 128, block 16, token-major --\n");
    bench_decode_fit(be, c);
    return 0;
  }
  if (section == "gemv-8b") {
    std::printf("\n-- Qwen3-8B batch-1 products (fused small-step ops), weights cold --\n");
    bench_gemv_8b(be, c);
    return 0;
  }
  if (section == "wgmma-8b") {
    // Qwen3-8B's layer products as one rank holds them at TP = 4, 2 and 1 (docs/parallel.md).
    std::printf("\n-- Qwen3-8B decode-step GEMMs at TP=4, 2 and 1: cuBLASLt vs ours --\n");
    bench_wgmma_gemms(be, c,
                      {{"tp4 qkv   K=4096 N=1536", 4096, 1536},
                       {"tp4 o     K=1024 N=4096", 1024, 4096},
                       {"tp4 gate_up K=4096 N=6144", 4096, 6144},
                       {"tp4 down  K=3072 N=4096", 3072, 4096},
                       {"tp2 qkv   K=4096 N=3072", 4096, 3072},
                       {"tp2 o     K=2048 N=4096", 2048, 4096},
                       {"tp2 down  K=6144 N=4096", 6144, 4096},
                       {"tp1 qkv   K=4096 N=6144", 4096, 6144},
                       {"tp1 o     K=4096 N=4096", 4096, 4096},
                       {"tp1 down  K=12288 N=4096", 12288, 4096}},
                      {64, 128, 256});
    return 0;
  }
  if (section == "rope") {
    std::printf("\n-- decode steps' qk_norm_rope_attention, Hq 16, Hkv 8, D 128, block 16 --\n");
    for (bool fp8 : {false, true}) {
      for (int n : {16, 32, 64, 256}) bench_rope_attention(be, c, n, 1024, fp8);
    }
    return 0;
  }
  if (section == "prefill") {
    std::printf("\n-- prefill attention, Hq 16, Hkv 8, D 128, block 16, token-major pages --\n");
    bench_prefill_attention(be, c);
    return 0;
  }
  std::printf("\n-- GEMMs (floor from the ceilings above) --\n");
  bench_gemms(be, c);
  if (section == "gemm") return 0;
  std::printf("\n-- decode-sized GEMMs: small-batch kernel vs cuBLASLt --\n");
  bench_small_gemms(be, c);
  std::printf("\n-- decode-step GEMMs: wgmma kernel vs cuBLASLt --\n");
  bench_wgmma_gemms(be, c);
  std::printf("\n-- paged attention, Hq 16, Hkv 8, D 128, block 16, token-major pages --\n");
  bench_decode_attention(be, c);
  bench_attention(be, c, "decode 256 seqs x 1024 ctx, pages in order", 256, 1024, 1, false);
  bench_attention(be, c, "decode 256 x 1024, general kernel", 256, 1024, 1, true, true);
  bench_attention(be, c, "decode 16 x 4096, general kernel", 16, 4096, 1, true, true);
  bench_prefill_attention(be, c);
  bench_attention(be, c, "prefill 32 x 1024, general kernel", 32, 1024, 1024, true, true);
  backend.reset();
  auto head_major = make_cuda_backend(0, CudaKvLayout::kHeadMajor);
  auto& hm = dynamic_cast<CudaBackend&>(*head_major);
  std::printf("\n-- the same, head-major pages --\n");
  bench_attention(hm, c, "decode 256 seqs x 1024 ctx", 256, 1024, 1);
  bench_attention(hm, c, "decode 256 seqs x 1024 ctx, pages in order", 256, 1024, 1, false);
  bench_attention(hm, c, "decode 16 seqs x 4096 ctx", 16, 4096, 1);
  bench_attention(hm, c, "prefill 4 seqs x 1024 new", 4, 1024, 1024);
  bench_attention(hm, c, "prefill 32 seqs x 1024 new", 32, 1024, 1024);
  return 0;
}

// `cuda_ops_bench wgmma-one T N K TILE SPLIT`: three plain launches of one configuration of
// the wgmma GEMM on random data, for a profiler (ncu -k regex:wgmma_gemm); TILE 0: the
// backend's linear() instead (cuBLASLt at these T), to profile beside it.
int run_wgmma_one(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: cuda_ops_bench wgmma-one T N K TILE SPLIT\n");
    return 2;
  }
  const int t = std::atoi(argv[2]), n = std::atoi(argv[3]), k = std::atoi(argv[4]);
  auto backend = make_cuda_backend(0);
  auto& be = dynamic_cast<CudaBackend&>(*backend);
  Tensor x = random_bf16(be, Shape{t, k});
  Tensor w = random_bf16(be, Shape{n, k});
  Tensor out = be.empty(DType::kBF16, Shape{t, n});
  const int tile = std::atoi(argv[5]);
  for (int i = 0; i < 3; ++i) {
    if (tile == 0) {
      be.linear(x, w, Tensor(), out);
    } else {
      kernels::wgmma_gemm(x.data(), w.data(), out.data(), t, n, k, 132, be.stream(),
                          {tile, std::atoi(argv[6])});
    }
  }
  be.synchronize();
  return 0;
}

// One prefill attention row alone (for ncu): the kernel KESTREL_PREFILL_SM90 selects.
// Host time of encoding one TMA map of a layer's K cache as the ws prefill kernel's launcher
// does (two per layer and prefill step): Qwen3-0.6B's token-major pages, 4,096 blocks of 16.
int run_tma_encode() {
  void* cache = nullptr;
  KS_CUDA_CHECK(cudaMalloc(&cache, 1 << 20));
  const uint64_t dims[3] = {128, 8, 4096 * 16};
  const uint64_t strides[2] = {128 * 2, 8 * 128 * 2};
  const uint32_t box[3] = {64, 1, 128};
  kernels::bf16_tensor_map(cache, 3, dims, strides, box);  // first call: the entry point
  constexpr int kCalls = 10000;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kCalls; ++i) kernels::bf16_tensor_map(cache, 3, dims, strides, box);
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  std::printf("tma map encode: %.3f us per map (%d calls)\n", us / kCalls, kCalls);
  KS_CUDA_CHECK(cudaFree(cache));
  return 0;
}

// `cuda_ops_bench decode-one NUM_SEQS KEYS HQ HKV`: one decode attention row alone (for ncu).
int run_decode_one(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: cuda_ops_bench decode-one NUM_SEQS KEYS HQ HKV\n");
    return 2;
  }
  auto backend = make_cuda_backend(0, CudaKvLayout::kTokenMajor);
  auto& be = dynamic_cast<CudaBackend&>(*backend);
  const Ceilings c = measure_ceilings(be);
  bench_attention_lens(be, c, "decode", std::vector<int32_t>(std::atoi(argv[2]), std::atoi(argv[3])),
                       1, true, false, false, false, 16, std::atoi(argv[4]), std::atoi(argv[5]));
  return 0;
}

int run_prefill_one(int argc, char** argv) {
  if (argc < 5 || argc > 8) {
    std::fprintf(stderr,
                 "usage: cuda_ops_bench prefill-one NUM_SEQS CONTEXT NEW_TOKENS [BLOCK_SIZE 16] "
                 "[SCATTER_PAGES 1] [bf16|fp8]\n");
    return 2;
  }
  auto backend = make_cuda_backend(0, CudaKvLayout::kTokenMajor);
  auto& be = dynamic_cast<CudaBackend&>(*backend);
  const Ceilings c = measure_ceilings(be);
  const int ctx = std::atoi(argv[3]);
  bench_attention_lens(be, c, "prefill", std::vector<int32_t>(std::atoi(argv[2]), ctx),
                       std::atoi(argv[4]), argc < 7 || std::atoi(argv[6]) != 0, false, false,
                       argc == 8 && std::string(argv[7]) == "fp8",
                       argc < 6 ? 16 : std::atoi(argv[5]));
  return 0;
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  try {
    if (argc > 1 && std::string(argv[1]) == "wgmma-one") return kestrel::run_wgmma_one(argc, argv);
    if (argc > 1 && std::string(argv[1]) == "tma-encode") return kestrel::run_tma_encode();
    if (argc > 1 && std::string(argv[1]) == "decode-one") return kestrel::run_decode_one(argc, argv);
    if (argc > 1 && std::string(argv[1]) == "prefill-one") {
      return kestrel::run_prefill_one(argc, argv);
    }
    const std::string section = argc > 1 ? argv[1] : "";
    if (section != "" && section != "decode" && section != "prefill" && section != "gemm" &&
        section != "fp8" && section != "rope" && section != "wgmma" && section != "wgmma-8b" &&
        section != "gemv-8b" && section != "decode-tp" && section != "decode-fit") {
      std::fprintf(stderr,
                   "cuda_ops_bench: unknown section '%s' (decode, prefill, fp8, rope, gemm, wgmma, "
                   "wgmma-8b, gemv-8b, decode-tp or decode-fit, or none for all)\n",
                   section.c_str());
      return 2;
    }
    return kestrel::run(section);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_ops_bench: %s\n", e.what());
    return 1;
  }
}
