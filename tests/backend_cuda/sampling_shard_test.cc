// The vocab-parallel split path (sampling_plain.h: plain_shard_stats, _pick, _finish) against
// the unsharded device sampler on the gathered rows, which sampling_test.cc checks against the
// CPU sampler. The ranks are simulated in one process: each gets its shard of the rows (the
// last rank's columns past the vocabulary hold 0.0, as the zero rows of a padded LM head
// give, on logits far below 0 so that a read of them would win), the statistics are gathered
// by a strided copy and the owners' tokens summed on the host, as the collectives would.
// The tokens must be the same bit for bit, on every rank.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backend/cuda/sampling/sampling_plain.h"
#include "sampling_test_util.h"

namespace kestrel {
namespace {

using sampling_kernels::PlainChunkStat;
using sampling_kernels::PlainShard;
using sampling_kernels::RowParams;
using sampling_kernels::RowResult;
using sampling_kernels::SampleArgs;
using sampling_kernels::kPlainChunk;
using sampling_test::Row;


template <typename T>
struct DeviceArray {
  T* ptr = nullptr;
  explicit DeviceArray(size_t n) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&ptr), n * sizeof(T)), cudaSuccess);
  }
  ~DeviceArray() { cudaFree(ptr); }
};

// Rows: greedy, and temperatures 0.5 / 1 / 1.7, random logits ~ N(-20, 3).
struct Rows {
  std::vector<Row> rows;
  std::vector<float> logits;  // [rows, vocab]
};

Rows make_rows(int num_rows, int vocab, uint32_t seed) {
  Rows r;
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(-20.0f, 3.0f);
  r.logits.resize(static_cast<size_t>(num_rows) * vocab);
  for (float& x : r.logits) x = normal(gen);
  const float temps[] = {0.0f, 0.5f, 1.0f, 1.7f};
  for (int i = 0; i < num_rows; ++i) {
    Row row;
    row.params.temperature = temps[i % 4];
    row.seed = 1000 + i;
    row.position = 7 * i + 3;
    r.rows.push_back(row);
  }
  // Row 0 (greedy): equal maxima in the first and the last id: the lowest id wins.
  r.logits[0] = 5.0f;
  r.logits[vocab - 1] = 5.0f;
  // Row 1 (T 0.5): all the mass in the last 40 ids (the last rank's shard).
  if (num_rows > 1) {
    for (int j = 0; j < vocab; ++j) r.logits[vocab + j] = j < vocab - 40 ? -sampling_test::kInf : 0.1f * (j % 7);
  }
  return r;
}

// Samples `rows` on `world` simulated ranks; returns every rank's results.
std::vector<std::vector<RowResult>> sample_sharded(const Rows& in, int vocab, int world) {
  const int R = static_cast<int>(in.rows.size());
  const int per_rank = (vocab + world - 1) / world;
  const int chunks = (per_rank + kPlainChunk - 1) / kPlainChunk;
  const int stride = chunks * kPlainChunk;
  std::vector<RowParams> params(R);
  for (int i = 0; i < R; ++i) {
    params[i].temperature = in.rows[i].params.temperature;
    params[i].seed = in.rows[i].seed;
    params[i].position = in.rows[i].position;
  }
  DeviceArray<RowParams> dparams(R);
  EXPECT_EQ(cudaMemcpy(dparams.ptr, params.data(), sizeof(RowParams) * R, cudaMemcpyHostToDevice),
            cudaSuccess);
  DeviceArray<PlainChunkStat> all(static_cast<size_t>(R) * world * chunks);
  DeviceArray<PlainChunkStat> local(static_cast<size_t>(R) * chunks);
  DeviceArray<float> logits(static_cast<size_t>(R) * stride);
  DeviceArray<float> owner(R);
  std::vector<SampleArgs> args(world);
  std::vector<PlainShard> shards(world);
  std::vector<std::unique_ptr<DeviceArray<RowResult>>> results;
  std::vector<std::unique_ptr<DeviceArray<int32_t>>> feedback;
  std::vector<std::vector<float>> owner_tokens(world, std::vector<float>(R));
  // Rank r's columns of every row into `logits` (0.0 past the vocabulary).
  auto upload_shard = [&](int r) {
    std::vector<float> host(static_cast<size_t>(R) * stride, 0.0f);
    for (int i = 0; i < R; ++i) {
      for (int j = 0; j < shards[r].valid; ++j) {
        host[static_cast<size_t>(i) * stride + j] =
            in.logits[static_cast<size_t>(i) * vocab + r * stride + j];
      }
    }
    EXPECT_EQ(cudaMemcpy(logits.ptr, host.data(), host.size() * 4, cudaMemcpyHostToDevice),
              cudaSuccess);
  };
  for (int r = 0; r < world; ++r) {
    shards[r] = PlainShard{r, chunks, std::min(stride, vocab - r * stride), stride};
    upload_shard(r);
    results.push_back(std::make_unique<DeviceArray<RowResult>>(R));
    feedback.push_back(std::make_unique<DeviceArray<int32_t>>(R));
    SampleArgs& a = args[r];
    a.logits = logits.ptr;
    a.rows = dparams.ptr;
    a.results = results.back()->ptr;
    a.feedback = feedback.back()->ptr;
    a.num_rows = R;
    a.num_plain = R;
    a.vocab = vocab;
    sampling_kernels::plain_shard_stats(a, shards[r], world, local.ptr, nullptr);
    // The all-gather by columns: rank r's [R, chunks] into columns [r * chunks, +chunks).
    EXPECT_EQ(cudaMemcpy2D(all.ptr + r * chunks, sizeof(PlainChunkStat) * world * chunks, local.ptr,
                           sizeof(PlainChunkStat) * chunks, sizeof(PlainChunkStat) * chunks, R,
                           cudaMemcpyDeviceToDevice),
              cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  // Every rank picks over all the statistics, with its own shard's logits for the walk.
  for (int r = 0; r < world; ++r) {
    upload_shard(r);
    sampling_kernels::plain_shard_pick(args[r], shards[r], world, all.ptr, owner.ptr, nullptr);
    EXPECT_EQ(cudaMemcpy(owner_tokens[r].data(), owner.ptr, 4 * R, cudaMemcpyDeviceToHost), cudaSuccess);
  }
  // The all-reduce: one rank holds each token, the others 0.
  std::vector<float> sum(R, 0.0f);
  for (int i = 0; i < R; ++i) {
    int holders = 0;
    for (int r = 0; r < world; ++r) {
      sum[i] += owner_tokens[r][i];
      holders += owner_tokens[r][i] != 0.0f;
    }
    EXPECT_LE(holders, 1) << "row " << i;
  }
  DeviceArray<float> dsum(R);
  EXPECT_EQ(cudaMemcpy(dsum.ptr, sum.data(), 4 * R, cudaMemcpyHostToDevice), cudaSuccess);
  std::vector<std::vector<RowResult>> out(world, std::vector<RowResult>(R));
  for (int r = 0; r < world; ++r) {
    sampling_kernels::plain_shard_finish(args[r], dsum.ptr, nullptr);
    EXPECT_EQ(cudaMemcpy(out[r].data(), results[r]->ptr, sizeof(RowResult) * R, cudaMemcpyDeviceToHost),
              cudaSuccess);
    std::vector<int32_t> fb(R);
    EXPECT_EQ(cudaMemcpy(fb.data(), feedback[r]->ptr, 4 * R, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < R; ++i) EXPECT_EQ(fb[i], out[r][i].token) << "rank " << r << " row " << i;
  }
  return out;
}

TEST(CudaSamplingShard, SameTokensAsTheGatheredRows) {
  KS_REQUIRE_GPU();
  struct Case {
    int vocab, world, rows;
  };
  // Qwen3's vocabulary at 2 and 4 ranks, and small odd ones (a last shard of a few ids).
  for (const Case c : {Case{151936, 2, 64}, Case{151936, 4, 24}, Case{3001, 3, 97}, Case{1000, 2, 97},
                       Case{2000, 4, 40}}) {
    SCOPED_TRACE(testing::Message() << "vocab " << c.vocab << " world " << c.world);
    const Rows in = make_rows(c.rows, c.vocab, 17 + c.vocab + c.world);
    const std::vector<SampledToken> want = sampling_test::gpu_sample(in.logits, c.vocab, in.rows);
    const auto got = sample_sharded(in, c.vocab, c.world);
    EXPECT_EQ(want[0].token_id, 0);  // the greedy tie
    for (int r = 0; r < c.world; ++r) {
      for (int i = 0; i < c.rows; ++i) {
        EXPECT_EQ(got[r][i].token, want[i].token_id) << "rank " << r << " row " << i;
        EXPECT_EQ(got[r][i].status, sampling_kernels::kRowOk);
      }
    }
  }
}

TEST(CudaSamplingShard, NoFiniteLogitIsTheRowsStatusOnEveryRank) {
  KS_REQUIRE_GPU();
  Rows in = make_rows(2, 1000, 5);
  for (int j = 0; j < 1000; ++j) in.logits[1000 + j] = -sampling_test::kInf;  // row 1: T 0.5
  const auto got = sample_sharded(in, 1000, 2);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(got[r][0].status, sampling_kernels::kRowOk);
    EXPECT_EQ(got[r][1].status, sampling_kernels::kRowNoFiniteLogit);
    EXPECT_EQ(got[r][1].token, 0);
  }
}

TEST(CudaSamplingShard, RejectsWhatItCannotSample) {
  KS_REQUIRE_GPU();
  SampleArgs a;
  a.num_rows = 4;
  a.num_plain = 3;  // a row with top_k or logprobs
  PlainShard s{0, 2, 500, 512};
  EXPECT_THROW(sampling_kernels::plain_shard_stats(a, s, 2, nullptr, nullptr), Error);
  a.num_plain = 4;
  a.num_processed = 1;  // penalties or a mask
  EXPECT_THROW(sampling_kernels::plain_shard_stats(a, s, 2, nullptr, nullptr), Error);
  a.num_processed = 0;
  EXPECT_THROW(sampling_kernels::plain_shard_stats(a, PlainShard{2, 2, 500, 512}, 2, nullptr, nullptr),
               Error);
  EXPECT_THROW(sampling_kernels::plain_shard_stats(a, PlainShard{0, 2, 600, 512}, 2, nullptr, nullptr),
               Error);
  EXPECT_THROW(sampling_kernels::plain_shard_stats(a, PlainShard{0, 40000, 500, 512}, 2, nullptr, nullptr),
               Error);
}

}  // namespace
}  // namespace kestrel
