// Micro-benchmark of the CPU backend's linear and attention, through the production
// CpuBackend entry points, at Qwen3-0.6B shapes.
//
// Floors printed next to each result, measured here at start-up:
//   - GEMM: GFLOP/s of one large square sgemm on the whole team (what OpenBLAS can do);
//   - memory: GB/s of a 256 MiB memcpy (decode attention streams the KV cache).
//
// Usage: cpu_ops_bench [num_threads]   (default: every core OpenMP reports)
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace kestrel {
namespace {

using Clock = std::chrono::steady_clock;

// Median seconds of `reps` runs after one warm-up.
template <typename F>
double time_it(F&& f, int reps) {
  f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto a = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

Tensor random_tensor(Backend& be, Shape shape, std::mt19937& rng) {
  Tensor t = be.empty(DType::kF32, shape);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = d(rng);
  return t;
}

Tensor i32(Backend& be, const std::vector<int32_t>& v, Shape shape) {
  Tensor t = be.empty(DType::kI32, shape);
  std::copy(v.begin(), v.end(), t.data_as<int32_t>());
  return t;
}

double gemm_floor(CpuBackend& be, std::mt19937& rng) {
  const int64_t n = 1024;
  Tensor a = random_tensor(be, {n, n}, rng), b = random_tensor(be, {n, n}, rng);
  Tensor c = be.empty(DType::kF32, {n, n});
  const double s = time_it([&] { be.linear(a, b, Tensor(), c); }, 5);
  return 2.0 * n * n * n / s / 1e9;
}

double memcpy_floor() {
  const size_t bytes = size_t(256) << 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  const double s = time_it([&] { std::memcpy(b.data(), a.data(), bytes); }, 5);
  return 2.0 * bytes / s / 1e9;  // read + write
}

void bench_linear(CpuBackend& be, std::mt19937& rng, double floor_gflops) {
  struct Shape3 {
    const char* name;
    int64_t n, k, max_t;
  };
  // The LM head's 622 MB of F32 weights do not fit in any cache: its T = 1 row is the
  // memory-bound case (bytes / time against the memcpy floor).
  const Shape3 shapes[] = {{"qkv", 4096, 1024, 256},
                           {"o_proj", 1024, 2048, 256},
                           {"gate_up", 6144, 1024, 256},
                           {"down", 1024, 3072, 256},
                           {"lm_head", 151936, 1024, 16}};
  std::printf("\nlinear: out[T, N] = x[T, K] w[N, K]^T   (floor: %.1f GFLOP/s large sgemm)\n",
              floor_gflops);
  std::printf("%-8s %5s %6s %6s %10s %10s %8s %9s\n", "op", "T", "N", "K", "ms", "GFLOP/s",
              "of floor", "w GB/s");
  for (const Shape3& s : shapes) {
    Tensor w = random_tensor(be, {s.n, s.k}, rng);
    for (int64_t T : {1, 2, 4, 8, 16, 256}) {
      if (T > s.max_t) continue;
      Tensor x = random_tensor(be, {T, s.k}, rng);
      Tensor out = be.empty(DType::kF32, {T, s.n});
      const double sec = time_it([&] { be.linear(x, w, Tensor(), out); }, T == 256 ? 5 : 20);
      const double gflops = 2.0 * T * s.n * s.k / sec / 1e9;
      const double weight_gbs = 4.0 * s.n * s.k / sec / 1e9;
      std::printf("%-8s %5ld %6ld %6ld %10.3f %10.1f %7.0f%% %9.1f\n", s.name, long(T), long(s.n),
                  long(s.k), sec * 1e3, gflops, 100.0 * gflops / floor_gflops, weight_gbs);
    }
  }
}

// B sequences, each with `context` keys of which `query` are new this step.
void bench_attention(CpuBackend& be, std::mt19937& rng, int B, int context, int query,
                     double floor_gbs, double floor_gflops) {
  const int Hq = 16, Hkv = 8, D = 128, bs = 16;
  const int blocks_per_seq = (context + bs - 1) / bs;
  const int num_blocks = B * blocks_per_seq;
  LayerKvCache kv{random_tensor(be, {num_blocks, bs, Hkv, D}, rng),
                  random_tensor(be, {num_blocks, bs, Hkv, D}, rng)};
  std::vector<int32_t> pos, slots, qsl{0}, lens, tables(size_t(B) * blocks_per_seq);
  std::iota(tables.begin(), tables.end(), 0);
  std::shuffle(tables.begin(), tables.end(), rng);
  double flops = 0;
  for (int b = 0; b < B; ++b) {
    for (int p = context - query; p < context; ++p) {
      pos.push_back(p);
      slots.push_back(tables[b * blocks_per_seq + p / bs] * bs + p % bs);
      flops += 4.0 * Hq * D * (p + 1);
    }
    qsl.push_back(static_cast<int32_t>(pos.size()));
    lens.push_back(context);
  }
  const int T = static_cast<int>(pos.size());
  AttentionMetadata m;
  m.num_tokens = T;
  m.num_seqs = B;
  m.max_query_len = query;
  m.max_seq_len = context;
  m.block_size = bs;
  m.positions = i32(be, pos, {T});
  m.slot_mapping = i32(be, slots, {T});
  m.query_start_loc = i32(be, qsl, {B + 1});
  m.seq_lens = i32(be, lens, {B});
  m.block_tables = i32(be, tables, {B, blocks_per_seq});
  Tensor q = random_tensor(be, {T, Hq * D}, rng);
  Tensor out = be.empty(DType::kF32, {T, Hq * D});
  const double sec = time_it(
      [&] {
        be.attention(q, kv, {Hq, Hkv, D}, m, 1.0f / std::sqrt(float(D)), out);
      },
      5);
  // Each (token, KV head) item reads its keys' K and V rows once.
  double bytes = 0;
  for (int p : pos) bytes += 2.0 * Hkv * D * sizeof(float) * (p + 1);
  const double gbs = bytes / sec / 1e9, gflops = flops / sec / 1e9;
  std::printf("%4d %8d %6d %10.3f %9.1f %7.0f%% %9.1f %7.0f%%\n", B, context, query, sec * 1e3, gbs,
              100 * gbs / floor_gbs, gflops, 100 * gflops / floor_gflops);
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  using namespace kestrel;
  const int threads = argc > 1 ? std::atoi(argv[1]) : 0;
  CpuBackend be(threads);
  std::mt19937 rng(0);
  std::printf("cpu_ops_bench: %d threads\n", be.num_threads());
  const double gemm = gemm_floor(be, rng);
  const double mem = memcpy_floor();
  std::printf("floors: sgemm 1024^3 %.1f GFLOP/s, memcpy %.1f GB/s (read + write)\n", gemm, mem);
  bench_linear(be, rng, gemm);
  std::printf("\nattention: Hq 16, Hkv 8, D 128, block 16 (floors: %.1f GB/s, %.1f GFLOP/s)\n", mem,
              gemm);
  std::printf("%4s %8s %6s %10s %9s %8s %9s %8s\n", "B", "context", "query", "ms", "GB/s", "of mem",
              "GFLOP/s", "of gemm");
  bench_attention(be, rng, 1, 1024, 1, mem, gemm);    // single-stream decode
  bench_attention(be, rng, 32, 1024, 1, mem, gemm);   // batched decode
  bench_attention(be, rng, 1, 512, 512, mem, gemm);   // prefill of one prompt
  bench_attention(be, rng, 4, 1024, 128, mem, gemm);  // chunked prefill after a prefix
  return 0;
}
