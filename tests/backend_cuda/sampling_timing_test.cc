// Timing of the device sampler at the headline shape, S = 256 rows of V = 151936 logits,
// against the time to read the logits once at the copy bandwidth measured on the device
// (the byte floor), and at S = 1 (single stream). Prints sample() per call (host packing,
// copies, kernels) and the kernels alone (the production launcher); checks the timed
// configurations against the CPU sampler.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/sampling/sampling.h"
#include "backend/cuda/sampling/sampling_nucleus.h"
#include "backend/cuda/sampling/sampling_topk.h"
#include "sampling_test_util.h"

namespace kestrel {
namespace {

using namespace cuda_test;
using namespace sampling_test;

// Time of the sampling kernels alone (the production launcher, no host packing or copies)
// for rows without penalties, in microseconds per call. Split: whether top_k, top_p and
// min_p rows make their first passes split over blocks as CudaBackend::sample does (in
// batches of at most kTopKSplitMaxRows / kNucleusSplitMaxRows such rows), always, or never
// (the one-block passes).
enum class Split { kAsSample, kAlways, kNever };
double kernel_us(CudaBackend& be, const Tensor& logits, const std::vector<Row>& rows, int vocab,
                 Split mode = Split::kAsSample) {
  namespace sk = sampling_kernels;
  const int n = static_cast<int>(rows.size());
  std::vector<sk::RowParams> params(n);
  int top = 1;
  for (int r = 0; r < n; ++r) {
    const SamplingParams& p = rows[r].params;
    params[r].temperature = p.temperature;
    params[r].top_k = p.top_k > 0 && p.top_k < vocab ? p.top_k : 0;
    params[r].top_p = p.top_p;
    params[r].min_p = p.min_p;
    params[r].num_logprobs = p.logprobs ? *p.logprobs : -1;
    params[r].seed = rows[r].seed;
    params[r].position = rows[r].position;
    top = std::max(top, params[r].num_logprobs);
  }
  Tensor params_dev = be.empty(DType::kU8, Shape{static_cast<int64_t>(sizeof(sk::RowParams) * n)});
  cudaMemcpy(params_dev.data(), params.data(), sizeof(sk::RowParams) * n, cudaMemcpyHostToDevice);
  Tensor results = be.empty(DType::kU8, Shape{static_cast<int64_t>(sizeof(sk::RowResult) * n)});
  Tensor tops = be.empty(DType::kU8, Shape{static_cast<int64_t>(sizeof(sk::TopLogprob) * n * top)});
  sk::SampleArgs args;
  args.logits = logits.data_as<float>();
  args.rows = params_dev.data_as<sk::RowParams>();
  args.results = results.data_as<sk::RowResult>();
  args.top = tops.data_as<sk::TopLogprob>();
  args.num_rows = n;
  args.vocab = vocab;
  args.top_stride = top;
  args.num_plain = static_cast<int>(std::count_if(params.begin(), params.end(), sk::is_plain));
  Tensor scratch;
  if (args.num_plain > 0) {
    scratch = be.empty(DType::kU8, Shape{static_cast<int64_t>(sk::plain_scratch_bytes(n, vocab))});
    args.plain_scratch = scratch.data();
  }
  args.num_topk_split = static_cast<int>(std::count_if(params.begin(), params.end(), sk::takes_topk_split));
  args.num_nucleus_split =
      static_cast<int>(std::count_if(params.begin(), params.end(), sk::takes_nucleus_split));
  auto split = [&](int rows, int max_rows) {
    return rows > 0 && (mode == Split::kAlways || (mode == Split::kAsSample && rows <= max_rows));
  };
  Tensor topk_scratch, nucleus_scratch;
  if (split(args.num_topk_split, sk::kTopKSplitMaxRows)) {
    topk_scratch = be.empty(DType::kU8, Shape{static_cast<int64_t>(sk::topk_scratch_bytes(n, vocab))});
    args.topk_scratch = topk_scratch.data();
  }
  if (split(args.num_nucleus_split, sk::kNucleusSplitMaxRows)) {
    nucleus_scratch =
        be.empty(DType::kU8, Shape{static_cast<int64_t>(sk::nucleus_scratch_bytes(n, vocab))});
    args.nucleus_scratch = nucleus_scratch.data();
  }
  return launches_us(be.stream(), [&] { sk::sample_rows(args, be.stream()); });
}

// S = 256 rows of V = 151936: time per call against the time to read the logits once at the
// copy bandwidth measured here. Checks the timed results against the CPU too.
TEST(CudaSampling, TimingAgainstTheLogitsByteFloor) {
  KS_REQUIRE_GPU();
  auto& be = dynamic_cast<CudaBackend&>(gpu());
  const int rows_n = 256, vocab = 151936;
  const size_t bytes = sizeof(float) * rows_n * vocab;
  // Copy bandwidth: a device-to-device copy reads and writes `bytes`.
  Tensor a = be.empty(DType::kU8, Shape{static_cast<int64_t>(bytes)});
  Tensor b = be.empty(DType::kU8, Shape{static_cast<int64_t>(bytes)});
  cudaEvent_t start, stop;
  ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&stop), cudaSuccess);
  float ms = 0;
  cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, be.stream());
  cudaEventRecord(start, be.stream());
  for (int i = 0; i < 5; ++i) {
    cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, be.stream());
  }
  cudaEventRecord(stop, be.stream());
  cudaEventSynchronize(stop);
  cudaEventElapsedTime(&ms, start, stop);
  const double bandwidth = 2.0 * bytes * 5 / (ms * 1e-3);
  const double floor_us = bytes / bandwidth * 1e6;
  std::printf("[ sampling ] copy bandwidth %.0f GB/s; reading the logits (%.1f MB) takes %.1f us\n",
              bandwidth / 1e9, bytes / 1e6, floor_us);

  std::mt19937 rng(99);
  struct Config {
    const char* name;
    float t;
    int k;
    float p;
    float m;
    int kind;
    int logprobs;
    bool penalties;
  };
  const Config configs[] = {
      {"greedy", 0.0f, -1, 1.0f, 0.0f, 6, -1, false},
      {"T=1, no filter", 1.0f, -1, 1.0f, 0.0f, 6, -1, false},
      {"T=0.6, no filter", 0.6f, -1, 1.0f, 0.0f, 6, -1, false},
      {"T=0.6 top_k=20 top_p=0.95", 0.6f, 20, 0.95f, 0.0f, 6, -1, false},
      {"T=0.7 top_k=50 top_p=0.9", 0.7f, 50, 0.9f, 0.0f, 6, -1, false},
      {"T=1 top_p=0.95", 1.0f, -1, 0.95f, 0.0f, 6, -1, false},
      {"T=1 min_p=0.05", 1.0f, -1, 1.0f, 0.05f, 6, -1, false},
      {"T=1 top_p=0.9, flat logits", 1.0f, -1, 0.9f, 0.0f, 0, -1, false},
      {"T=0.7 top_k=50 top_p=0.9 + 20 logprobs", 0.7f, 50, 0.9f, 0.0f, 6, 20, false},
      {"T=0.7 top_k=50 top_p=0.9 + penalties", 0.7f, 50, 0.9f, 0.0f, 6, -1, true},
  };
  for (const Config& c : configs) {
    std::vector<float> logits(static_cast<size_t>(rows_n) * vocab);
    std::vector<Row> rows;
    for (int r = 0; r < rows_n; ++r) {
      fill_row(logits.data() + static_cast<size_t>(r) * vocab, vocab, c.kind, rng);
      Row row = row_with(c.t, c.k, c.p, c.m);
      row.seed = rng();
      row.position = 300 + r;
      if (c.logprobs >= 0) row.params.logprobs = c.logprobs;
      if (c.penalties) {
        for (int i = 0; i < 512; ++i) row.prompt.push_back(rng() % vocab);
        for (int i = 0; i < 256; ++i) row.output.push_back(rng() % vocab);
        row.params.repetition_penalty = 1.1f;
        row.params.frequency_penalty = 0.2f;
        row.params.presence_penalty = 0.2f;
      }
      rows.push_back(std::move(row));
    }
    Tally tally;
    compare(logits, vocab, rows, tally, c.name);  // also the warm-up
    ASSERT_LE(tally.near_ties, 1) << c.name;
    // The same batch, built once, for every timed call.
    const SamplingBatch batch = make_batch(rows);
    const Tensor dev = upload_logits(logits, rows_n, vocab);
    be.sample(dev, batch);
    constexpr int kIters = 10;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kIters; ++i) be.sample(dev, batch);
    const auto t1 = std::chrono::steady_clock::now();
    const double wall_us = std::chrono::duration<double, std::micro>(t1 - t0).count() / kIters;
    std::printf("[ sampling ] S=%d V=%d %-40s sample() %7.1f us", rows_n, vocab, c.name, wall_us);
    if (!c.penalties) {
      const double kernels = kernel_us(be, dev, rows, vocab);
      std::printf(", kernels %7.1f us = %.1fx the floor", kernels, kernels / floor_us);
      if ((c.k > 0 || c.p < 1.0f || c.m > 0.0f) && c.logprobs < 0) {
        std::printf(" (first passes in one block: %.1f us)", kernel_us(be, dev, rows, vocab, Split::kNever));
      }
    }
    std::printf(" (floor %.1f us)\n", floor_us);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

// Rows of Qwen3's defaults (T 0.6, top_k 20, top_p 0.95) and of Llama 3's (T 0.6, top_p 0.9)
// over batch sizes: the kernels with the first passes split over blocks (sampling_topk.h,
// sampling_nucleus.h) and in one block, and the split passes alone.
TEST(CudaSampling, TimingOfTheSplitPassesOverBatchSizes) {
  KS_REQUIRE_GPU();
  namespace sk = sampling_kernels;
  auto& be = dynamic_cast<CudaBackend&>(gpu());
  const int vocab = 151936;
  std::mt19937 rng(21);
  for (const int k : {20, 0}) {
    const float top_p = k > 0 ? 0.95f : 0.9f;
    for (int n : {1, 2, 4, 8, 16, 32, 64, 128, 256}) {
      std::vector<float> logits(static_cast<size_t>(n) * vocab);
      std::vector<Row> rows;
      std::vector<sk::RowParams> params(n);
      for (int r = 0; r < n; ++r) {
        fill_row(logits.data() + static_cast<size_t>(r) * vocab, vocab, 6, rng);
        rows.push_back(row_with(0.6f, k > 0 ? k : -1, top_p));
        rows.back().seed = rng();
        rows.back().position = r;
        params[r].temperature = 0.6f;
        params[r].top_k = k;
        params[r].top_p = top_p;
      }
      const Tensor dev = upload_logits(logits, n, vocab);
      const double split = kernel_us(be, dev, rows, vocab, Split::kAlways);
      const double one = kernel_us(be, dev, rows, vocab, Split::kNever);
      // The split passes alone.
      Tensor params_dev = be.empty(DType::kU8, Shape{static_cast<int64_t>(sizeof(sk::RowParams) * n)});
      ASSERT_EQ(cudaMemcpy(params_dev.data(), params.data(), sizeof(sk::RowParams) * n,
                           cudaMemcpyHostToDevice),
                cudaSuccess);
      const size_t bytes = k > 0 ? sk::topk_scratch_bytes(n, vocab) : sk::nucleus_scratch_bytes(n, vocab);
      Tensor scratch = be.empty(DType::kU8, Shape{static_cast<int64_t>(bytes)});
      sk::SampleArgs args;
      args.logits = dev.data_as<float>();
      args.rows = params_dev.data_as<sk::RowParams>();
      args.num_rows = n;
      args.vocab = vocab;
      (k > 0 ? args.topk_scratch : args.nucleus_scratch) = scratch.data();
      const double alone = launches_us(be.stream(), [&] {
        if (k > 0) {
          sk::launch_topk_segments(args, be.stream());
        } else {
          sk::launch_nucleus_segments(args, be.stream());
        }
      });
      ASSERT_EQ(cudaStreamSynchronize(be.stream()), cudaSuccess);
      std::printf("[ sampling ] S=%3d T=0.6 top_k %2d top_p %.2f: kernels %7.1f us split, %7.1f us "
                  "one block; split passes alone %7.1f us\n",
                  n, k, top_p, split, one, alone);
    }
  }
}

// One row of V = 151936 (single-stream decoding): the sampling kernels alone and the whole
// sample() call (host packing, one upload, the kernels, one copy back, the sync). Checks the
// tokens of the timed configurations against the CPU on 64 rows each, one call per row.
TEST(CudaSampling, TimingAtBatchOne) {
  KS_REQUIRE_GPU();
  auto& be = dynamic_cast<CudaBackend&>(gpu());
  const int vocab = 151936;
  std::mt19937 rng(7);
  struct Config {
    const char* name;
    float t;
    int k;
    float p;
  };
  const Config configs[] = {
      {"greedy", 0.0f, -1, 1.0f},
      {"T=0.6, no filter", 0.6f, -1, 1.0f},
      {"T=1, no filter", 1.0f, -1, 1.0f},
      {"T=0.6 top_k=20 top_p=0.95", 0.6f, 20, 0.95f},
      {"T=0.7 top_k=50 top_p=0.9", 0.7f, 50, 0.9f},
      {"T=0.6 top_p=0.9 (Llama 3)", 0.6f, -1, 0.9f},
  };
  for (const Config& c : configs) {
    Tally tally;
    std::vector<float> logits(vocab);
    std::vector<Row> rows;
    for (int i = 0; i < 64; ++i) {
      fill_row(logits.data(), vocab, 6, rng);
      rows = {row_with(c.t, c.k, c.p)};
      rows[0].seed = rng();
      rows[0].position = 100 + i;
      compare(logits, vocab, rows, tally, c.name);
    }
    ASSERT_LE(tally.near_ties, 1) << c.name;
    const SamplingBatch batch = make_batch(rows);
    const Tensor dev = upload_logits(logits, 1, vocab);
    for (int i = 0; i < 10; ++i) be.sample(dev, batch);
    constexpr int kIters = 200;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kIters; ++i) be.sample(dev, batch);
    const auto t1 = std::chrono::steady_clock::now();
    const double wall_us = std::chrono::duration<double, std::micro>(t1 - t0).count() / kIters;
    std::printf("[ sampling ] S=1 V=%d %-40s sample() %7.1f us, kernels %7.1f us", vocab,
                c.name, wall_us, kernel_us(be, dev, rows, vocab));
    if (c.k > 0 || c.p < 1.0f) {
      std::printf(" (first passes in one block: %.1f us)", kernel_us(be, dev, rows, vocab, Split::kNever));
    }
    std::printf("\n");
  }
}

}  // namespace
}  // namespace kestrel
