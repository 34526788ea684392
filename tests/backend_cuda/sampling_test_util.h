// Shared by the device-sampler tests: rows described once (the CPU sampler's inputs) and
// turned into a SamplingBatch for the GPU, the CPU reference, the token and logprob
// comparison, and generators of logit rows.
//
// Tokens must match the CPU's exactly, except where the CPU's own cumulative sum lies within
// float rounding of the draw target (both tokens are then right; the two sides round the
// weights' exp and the sums differently): compare() counts those, after checking that they
// are such near-ties (docs/gpu_sampling.md).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/sampling_batch.h"
#include "core/philox.h"
#include "cuda_test_util.h"
#include "sampling/filters.h"
#include "sampling/logprobs.h"
#include "sampling/penalties.h"
#include "sampling/sampler.h"

namespace kestrel::sampling_test {

using cuda_test::gpu;
constexpr float kInf = std::numeric_limits<float>::infinity();

// One row: the CPU sampler's inputs, from which the SamplingBatch is also built.
struct Row {
  SamplingParams params;
  uint64_t seed = 0;
  int64_t position = 0;
  std::vector<int> prompt, output, masked;
};

// masked ids become the CPU's min_tokens stop ids (min_tokens not reached, no EOS).
inline std::vector<SampledToken> cpu_sample(const std::vector<float>& logits, int vocab,
                                            std::vector<Row>& rows) {
  std::vector<SamplingRow> cpu(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    Row& row = rows[r];
    row.params.stop_token_ids = row.masked;
    row.params.min_tokens = row.masked.empty() ? 0 : static_cast<int>(row.output.size()) + 1;
    cpu[r] = SamplingRow{&row.params, row.seed, row.position, row.prompt, row.output, {}};
  }
  return sample(logits.data(), vocab, cpu);
}

// The SamplingBatch the runner would build for these rows.
inline SamplingBatch make_batch(const std::vector<Row>& rows) {
  SamplingBatch b;
  b.num_rows = static_cast<int>(rows.size());
  b.prompt_offsets = b.output_offsets = b.masked_offsets = b.bias_offsets = {0};
  auto append = [](std::vector<int>& flat, std::vector<int>& offsets, const std::vector<int>& v) {
    flat.insert(flat.end(), v.begin(), v.end());
    offsets.push_back(static_cast<int>(flat.size()));
  };
  for (const Row& row : rows) {
    b.add_row_params(row.params, row.seed, row.position);
    append(b.prompt_tokens, b.prompt_offsets, row.prompt);
    append(b.output_tokens, b.output_offsets, row.output);
    append(b.masked_tokens, b.masked_offsets, row.masked);
    for (const auto& [id, bias] : row.params.logit_bias) {
      b.bias_tokens.push_back(id);
      b.bias_values.push_back(bias);
    }
    b.bias_offsets.push_back(static_cast<int>(b.bias_tokens.size()));
  }
  return b;
}

inline Tensor upload_logits(const std::vector<float>& logits, int rows, int vocab) {
  Tensor host = Tensor::host(DType::kF32, Shape{rows, vocab});
  std::copy(logits.begin(), logits.end(), host.data_as<float>());
  return gpu().upload(host, DType::kF32);
}

inline std::vector<SampledToken> gpu_sample(const std::vector<float>& logits, int vocab,
                                            const std::vector<Row>& rows) {
  return gpu().sample(upload_logits(logits, static_cast<int>(rows.size()), vocab), make_batch(rows));
}

// True when the GPU's token is a valid pick under float rounding: it is kept by the CPU's
// filters and the CPU's running sum (ascending ids) at its start or end lies within 1e-5
// of the total from the draw target.
inline bool is_near_tie(std::span<const float> raw, const Row& row, int gpu_token) {
  std::vector<float> x(raw.begin(), raw.end());
  apply_min_tokens(x, row.params, row.output.size(), {});
  apply_logit_bias(x, row.params);
  apply_penalties(x, row.params, row.prompt, row.output);
  const std::vector<int> kept = kept_token_ids(x, row.params);
  const float max = *std::max_element(x.begin(), x.end());
  double total = 0.0;
  for (int id : kept) total += std::exp((x[id] - max) / row.params.temperature);
  const double target = uniform01(row.seed, row.position, 0) * total;
  double cum = 0.0;
  for (int id : kept) {
    const double before = cum;
    cum += std::exp((x[id] - max) / row.params.temperature);
    if (id == gpu_token) {
      return std::min(std::fabs(before - target), std::fabs(cum - target)) <= 1e-5 * total;
    }
  }
  return false;
}

struct Tally {
  int rows = 0;
  int near_ties = 0;
};

// Samples the rows on both sides and checks tokens (near-ties counted in `tally`) and
// logprobs.
inline void compare(const std::vector<float>& logits, int vocab, std::vector<Row>& rows,
                    Tally& tally, const std::string& what) {
  const std::vector<SampledToken> gpu = gpu_sample(logits, vocab, rows);
  const std::vector<SampledToken> cpu = cpu_sample(logits, vocab, rows);
  ASSERT_EQ(gpu.size(), rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    const Row& row = rows[r];
    const std::span<const float> raw(logits.data() + r * vocab, vocab);
    SCOPED_TRACE(testing::Message() << what << " row " << r << " T " << row.params.temperature
                                    << " top_k " << row.params.top_k << " top_p "
                                    << row.params.top_p << " min_p " << row.params.min_p);
    ++tally.rows;
    const int token = gpu[r].token_id;
    if (token != cpu[r].token_id) {
      ASSERT_FALSE(row.params.greedy()) << "greedy token " << token << " vs " << cpu[r].token_id;
      ASSERT_TRUE(is_near_tie(raw, row, token))
          << "GPU token " << token << ", CPU token " << cpu[r].token_id;
      ++tally.near_ties;
    }
    ASSERT_EQ(gpu[r].logprobs.has_value(), row.params.logprobs.has_value());
    if (!row.params.logprobs) continue;
    // Reference logprobs for the token the GPU picked (the same token but for near-ties).
    const TokenLogprobs ref = compute_logprobs(raw, token, *row.params.logprobs);
    const TokenLogprobs& got = *gpu[r].logprobs;
    EXPECT_EQ(got.token_id, token);
    EXPECT_NEAR(got.logprob, ref.logprob, 1e-4);
    EXPECT_EQ(got.rank, ref.rank);
    ASSERT_EQ(got.top.size(), ref.top.size());
    for (size_t i = 0; i < ref.top.size(); ++i) {
      EXPECT_EQ(got.top[i].first, ref.top[i].first) << "top " << i;
      if (std::isinf(ref.top[i].second)) {
        EXPECT_EQ(got.top[i].second, ref.top[i].second) << "top " << i;
      } else {
        EXPECT_NEAR(got.top[i].second, ref.top[i].second, 1e-4) << "top " << i;
      }
    }
  }
}

// Logit rows of several shapes: spread, peaked, heavy ties, -inf holes, all equal, wide;
// kind 6 (timing only) is LLM-like: a bulk N(0, 2) and a head of 100 tokens descending from
// 14, so the nucleus at top_p 0.9 is a few dozen tokens.
inline void fill_row(float* out, int vocab, int kind, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  if (kind == 6) {
    for (int i = 0; i < vocab; ++i) out[i] = 2.0f * normal(rng);
    for (int j = 0; j < 100; ++j) out[rng() % vocab] = 14.0f - 0.08f * j;
    return;
  }
  for (int i = 0; i < vocab; ++i) {
    const float z = normal(rng);
    switch (kind % 6) {
      case 0: out[i] = z; break;
      case 1: out[i] = 2.5f * z; break;
      case 2: out[i] = std::round(4.0f * z) / 2.0f; break;  // many exact ties
      case 3: out[i] = (rng() % 10 == 0 && i > 0) ? -kInf : 3.0f * z; break;
      case 4: out[i] = 0.5f; break;
      default: out[i] = 30.0f * z; break;
    }
  }
  if (kind % 6 == 1) {
    for (int j = 0; j < 5; ++j) out[rng() % vocab] += 12.0f;  // a few likely tokens
  }
}


// Device time of launch() on `stream` in microseconds: one warm-up, then the mean of 20
// back to back.
template <typename Launch>
double launches_us(cudaStream_t stream, Launch launch) {
  launch();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  constexpr int kIters = 20;
  cudaEventRecord(start, stream);
  for (int i = 0; i < kIters; ++i) launch();
  cudaEventRecord(stop, stream);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms * 1e3 / kIters;
}

inline Row row_with(float t, int k = -1, float p = 1.0f, float m = 0.0f) {
  Row row;
  row.params.temperature = t;
  row.params.top_k = k;
  row.params.top_p = p;
  row.params.min_p = m;
  return row;
}


}  // namespace kestrel::sampling_test
