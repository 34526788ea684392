// The split first passes (sampling_topk.h for top_k rows, sampling_nucleus.h for top_p /
// min_p rows) against the one-block passes on the same rows: the same token and status, since
// the candidate list must be the same (top_k bit for bit; top_p sums the row's mass in another
// order, which could move a token only where the draw lands within ~1e-16 of a boundary).
// sampling_test.cc checks the production path (split where it applies) against the CPU
// sampler; this file checks that the split passes really ran where they should and give the
// one-block passes' tokens on the shapes that stress them: ties at the k-th value spread over
// segments, segments shorter than k, a segment over its cap, -inf rows and NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/sampling/sampling_nucleus.h"
#include "backend/cuda/sampling/sampling_plain.h"
#include "backend/cuda/sampling/sampling_topk.h"
#include "sampling_test_util.h"

namespace kestrel {
namespace {

namespace sk = sampling_kernels;
using sampling_test::fill_row;
using sampling_test::kInf;

struct Sampled {
  std::vector<sk::RowResult> results;
  std::vector<sk::TopKSegment> segments;  // [rows, segments], split runs only
  std::vector<sk::NucleusSegment> nucleus;  // [rows, segments], split runs only
};

template <typename T>
Tensor to_device(CudaBackend& be, const std::vector<T>& v) {
  Tensor t = be.empty(DType::kU8, Shape{static_cast<int64_t>(std::max<size_t>(sizeof(T) * v.size(), 8))});
  EXPECT_EQ(cudaMemcpy(t.data(), v.data(), sizeof(T) * v.size(), cudaMemcpyHostToDevice), cudaSuccess);
  return t;
}

// Samples the rows with the production launcher, the first pass of top_k rows split or not.
Sampled sample(const std::vector<float>& logits, int vocab, const std::vector<sk::RowParams>& params,
           bool split) {
  auto& be = dynamic_cast<CudaBackend&>(cuda_test::gpu());
  const int n = static_cast<int>(params.size());
  const Tensor dlogits = to_device(be, logits);
  const Tensor dparams = to_device(be, params);
  Tensor results = be.empty(DType::kU8, Shape{static_cast<int64_t>(sizeof(sk::RowResult) * n)});
  constexpr int kTop = 8;  // rows asking for logprobs ask for at most this many
  Tensor top = be.empty(DType::kU8, Shape{static_cast<int64_t>(sizeof(sk::TopLogprob) * n * kTop)});
  sk::SampleArgs args;
  args.logits = dlogits.data_as<float>();
  args.rows = dparams.data_as<sk::RowParams>();
  args.results = results.data_as<sk::RowResult>();
  args.top = top.data_as<sk::TopLogprob>();
  args.top_stride = kTop;
  args.num_rows = n;
  args.vocab = vocab;
  args.num_plain = static_cast<int>(std::count_if(params.begin(), params.end(), sk::is_plain));
  Tensor plain, topk, nucleus;
  if (args.num_plain > 0) {
    plain = be.empty(DType::kU8, Shape{static_cast<int64_t>(sk::plain_scratch_bytes(n, vocab))});
    args.plain_scratch = plain.data();
  }
  args.num_topk_split = static_cast<int>(std::count_if(params.begin(), params.end(), sk::takes_topk_split));
  if (split && args.num_topk_split > 0) {
    topk = be.empty(DType::kU8, Shape{static_cast<int64_t>(sk::topk_scratch_bytes(n, vocab))});
    // Poisoned: a list or record read before it is written shows as a wrong token.
    EXPECT_EQ(cudaMemset(topk.data(), 0xff, topk.nbytes()), cudaSuccess);
    args.topk_scratch = topk.data();
  }
  args.num_nucleus_split =
      static_cast<int>(std::count_if(params.begin(), params.end(), sk::takes_nucleus_split));
  if (split && args.num_nucleus_split > 0) {
    nucleus = be.empty(DType::kU8, Shape{static_cast<int64_t>(sk::nucleus_scratch_bytes(n, vocab))});
    EXPECT_EQ(cudaMemset(nucleus.data(), 0xff, nucleus.nbytes()), cudaSuccess);
    args.nucleus_scratch = nucleus.data();
  }
  sk::sample_rows(args, be.stream());
  EXPECT_EQ(cudaStreamSynchronize(be.stream()), cudaSuccess);
  Sampled run;
  run.results.resize(n);
  EXPECT_EQ(cudaMemcpy(run.results.data(), results.data(), sizeof(sk::RowResult) * n,
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  if (topk.defined()) {
    run.segments.resize(static_cast<size_t>(n) * sk::topk_segments(vocab));
    EXPECT_EQ(cudaMemcpy(run.segments.data(), topk.data(), sizeof(sk::TopKSegment) * run.segments.size(),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
  if (nucleus.defined()) {
    run.nucleus.resize(static_cast<size_t>(n) * sk::topk_segments(vocab));
    EXPECT_EQ(cudaMemcpy(run.nucleus.data(), nucleus.data(), sizeof(sk::NucleusSegment) * run.nucleus.size(),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
  return run;
}

// Rows of the kind `takes` whose split passes kept every segment's list in `segments` (the
// one-block kernel started from them, unless their union overflowed the shared list).
template <typename Segment, typename Takes>
int rows_split(const std::vector<Segment>& segments, int vocab,
               const std::vector<sk::RowParams>& params, Takes takes) {
  const int segs = sk::topk_segments(vocab);
  int split = 0;
  for (size_t r = 0; r < params.size(); ++r) {
    if (!takes(params[r])) continue;
    bool all = true;
    for (int s = 0; s < segs; ++s) all = all && segments[r * segs + s].count >= 0;
    split += all ? 1 : 0;
  }
  return split;
}

int rows_split(const Sampled& run, int vocab, const std::vector<sk::RowParams>& params) {
  return rows_split(run.segments, vocab, params, sk::takes_topk_split);
}

int rows_split_nucleus(const Sampled& run, int vocab, const std::vector<sk::RowParams>& params) {
  return rows_split(run.nucleus, vocab, params, sk::takes_nucleus_split);
}

sk::RowParams params_of(float t, int k, float p, float m, uint64_t seed, int64_t position) {
  sk::RowParams r;
  r.temperature = t;
  r.top_k = k;
  r.top_p = p;
  r.min_p = m;
  r.seed = seed;
  r.position = position;
  return r;
}

// Both runs agree row for row; returns the split run.
Sampled expect_same_tokens(const std::vector<float>& logits, int vocab,
                       const std::vector<sk::RowParams>& params) {
  const Sampled one = sample(logits, vocab, params, false);
  const Sampled split = sample(logits, vocab, params, true);
  for (size_t r = 0; r < params.size(); ++r) {
    EXPECT_EQ(split.results[r].token, one.results[r].token)
        << "row " << r << " top_k " << params[r].top_k << " top_p " << params[r].top_p;
    EXPECT_EQ(split.results[r].status, one.results[r].status) << "row " << r;
  }
  return split;
}

TEST(CudaSamplingTopK, SameTokensAsTheOneBlockPassOnLlmLikeRows) {
  KS_REQUIRE_GPU();
  const int vocab = 151936;
  std::mt19937 rng(31);
  std::vector<sk::RowParams> params;
  for (int k : {1, 2, 20, 50, 256}) {
    for (float p : {1.0f, 0.95f, 0.8f}) {
      for (float t : {0.6f, 1.0f, 1.7f}) {
        params.push_back(params_of(t, k, p, k == 50 ? 0.05f : 0.0f, rng(), rng() % 4096));
      }
    }
  }
  params.push_back(params_of(0.0f, 20, 0.95f, 0.0f, 1, 2));  // greedy: not split
  params.push_back(params_of(0.7f, 20, 1.0f, 0.0f, 3, 4));
  params.back().num_logprobs = 5;                            // logprobs: not split
  std::vector<float> logits(params.size() * vocab);
  for (size_t r = 0; r < params.size(); ++r) fill_row(logits.data() + r * vocab, vocab, 6, rng);
  const Sampled split = expect_same_tokens(logits, vocab, params);
  const int eligible = static_cast<int>(std::count_if(params.begin(), params.end(), sk::takes_topk_split));
  EXPECT_EQ(eligible, static_cast<int>(params.size()) - 2);
  EXPECT_EQ(rows_split(split, vocab, params), eligible) << "every LLM-like row keeps its segments' lists";
}

// Every logit shape of the CPU comparison on vocab sizes around the segment's edges: a last
// segment of one id, a vocabulary of one segment, of fewer ids than k.
TEST(CudaSamplingTopK, SameTokensAsTheOneBlockPassOnEveryShape) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(5);
  for (int vocab : {3, 7, 300, 8191, 8192, 8193, 20000, 151936}) {
    SCOPED_TRACE(testing::Message() << "vocab " << vocab);
    std::vector<sk::RowParams> params;
    std::vector<float> logits;
    int kind = 0;
    for (int k : {1, 5, 50, 256}) {
      if (k >= vocab) continue;  // the host turns top_k >= vocab off
      for (float p : {1.0f, 0.6f}) {
        for (int rep = 0; rep < 6; ++rep) {
          params.push_back(params_of(rep % 2 ? 0.7f : 1.3f, k, p, 0.0f, rng(), rng() % 4096));
          logits.resize(params.size() * vocab);
          fill_row(logits.data() + (params.size() - 1) * vocab, vocab, kind++, rng);
        }
      }
    }
    expect_same_tokens(logits, vocab, params);
  }
}

// Ties at the k-th value in many segments: every one of them stays a candidate, so the draw
// reaches ids of every segment.
TEST(CudaSamplingTopK, TiesAtTheKthValueAcrossSegmentsAreAllKept) {
  KS_REQUIRE_GPU();
  const int vocab = 151936, rows = 96;
  std::mt19937 rng(8);
  std::normal_distribution<float> bulk(-10.0f, 1.0f);
  std::vector<float> row(vocab);
  for (float& x : row) x = bulk(rng);
  std::vector<int> tied;
  for (int i = 0; i < 30; ++i) tied.push_back(97 + i * 5003);  // 30 ids over 19 segments
  for (int id : tied) row[id] = 3.0f;
  std::vector<float> logits;
  std::vector<sk::RowParams> params;
  for (int r = 0; r < rows; ++r) {
    logits.insert(logits.end(), row.begin(), row.end());
    params.push_back(params_of(1.0f, 5, 1.0f, 0.0f, 1000 + r, r));
  }
  const Sampled split = expect_same_tokens(logits, vocab, params);
  EXPECT_EQ(rows_split(split, vocab, params), rows);
  std::set<int> drawn;
  for (const sk::RowResult& res : split.results) {
    EXPECT_TRUE(std::find(tied.begin(), tied.end(), res.token) != tied.end()) << res.token;
    drawn.insert(res.token);
  }
  // 96 uniform draws over 30 ids: fewer than 20 distinct has probability below 1e-4.
  EXPECT_GE(drawn.size(), 20u);
}

// A flat segment keeps more than its cap: its row takes the one-block passes, the others
// in the same call stay split.
TEST(CudaSamplingTopK, ASegmentOverItsCapSendsItsRowToTheOneBlockPass) {
  KS_REQUIRE_GPU();
  const int vocab = 40000;
  std::mt19937 rng(12);
  std::vector<float> logits(3 * vocab);
  for (int r = 0; r < 3; ++r) fill_row(logits.data() + r * vocab, vocab, 6, rng);
  for (int j = 8192; j < 2 * 8192; ++j) logits[j] = 20.0f;  // row 0, segment 1: all equal
  std::vector<sk::RowParams> params = {params_of(1.0f, 20, 0.9f, 0.0f, 1, 1),
                                       params_of(1.0f, 20, 0.9f, 0.0f, 2, 2),
                                       params_of(0.8f, 40, 1.0f, 0.0f, 3, 3)};
  const Sampled split = expect_same_tokens(logits, vocab, params);
  const int segs = sk::topk_segments(vocab);
  EXPECT_EQ(split.segments[1].count, -1);
  EXPECT_GE(split.segments[0].count, 0);
  EXPECT_EQ(rows_split(split, vocab, params), 2);
  EXPECT_TRUE(split.results[0].token >= 8192 && split.results[0].token < 2 * 8192);
  EXPECT_EQ(segs, 5);
}

// Four rows of `vocab` logits: 0 without a finite logit, 1 with one +inf, 2 with a NaN, 3
// with every even id at -inf.
std::vector<float> infinite_and_nan_rows(int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> logits(4 * vocab);
  for (int r = 0; r < 4; ++r) fill_row(logits.data() + r * vocab, vocab, 1, rng);
  std::fill(logits.begin(), logits.begin() + vocab, -kInf);
  logits[vocab + 17] = kInf;
  logits[2 * vocab + 9000] = std::nanf("");
  for (int j = 0; j < vocab; j += 2) logits[3 * vocab + j] = -kInf;
  return logits;
}

TEST(CudaSamplingTopK, InfiniteAndNanLogitsAsTheOneBlockPass) {
  KS_REQUIRE_GPU();
  const int vocab = 20000;
  std::vector<sk::RowParams> params;
  for (int r = 0; r < 4; ++r) params.push_back(params_of(0.9f, 10, 0.9f, 0.0f, 50 + r, r));
  const Sampled split = expect_same_tokens(infinite_and_nan_rows(vocab, 3), vocab, params);
  EXPECT_EQ(split.results[0].status, sk::kRowNoFiniteLogit);
  EXPECT_EQ(split.results[3].status, sk::kRowOk);
  EXPECT_EQ(split.results[3].token % 2, 1);
}

// top_p and min_p rows (Llama 3's defaults are T 0.6, top_p 0.9) on LLM-like logits draw the
// one-block pass's token, and keep their segments' candidates but where the nucleus holds
// more than the list: at T 1.5 the bulk of 151,936 ids N(0, 2) holds ~63% of the mass
// against the head of 100 from 14 down (sum exp((x - 14) / 1.5): ~32 against ~19), so top_p
// 0.9 and 0.95 without min_p need tens of thousands of ids (the one-block path's list does not
// hold them either).
TEST(CudaSamplingNucleus, SameTokensAsTheOneBlockPassOnLlmLikeRows) {
  KS_REQUIRE_GPU();
  const int vocab = 151936;
  std::mt19937 rng(41);
  std::vector<sk::RowParams> params;
  for (float p : {1.0f, 0.95f, 0.9f, 0.5f}) {
    for (float m : {0.0f, 0.05f, 0.2f}) {
      if (p == 1.0f && m == 0.0f) continue;  // plain
      for (float t : {0.6f, 1.0f, 1.5f}) params.push_back(params_of(t, 0, p, m, rng(), rng() % 4096));
    }
  }
  params.push_back(params_of(0.7f, 20, 0.9f, 0.0f, 5, 6));  // top_k: the other split
  std::vector<float> logits(params.size() * vocab);
  for (size_t r = 0; r < params.size(); ++r) fill_row(logits.data() + r * vocab, vocab, 6, rng);
  const Sampled split = expect_same_tokens(logits, vocab, params);
  const int eligible =
      static_cast<int>(std::count_if(params.begin(), params.end(), sk::takes_nucleus_split));
  EXPECT_EQ(eligible, static_cast<int>(params.size()) - 1);
  const int wide = static_cast<int>(std::count_if(params.begin(), params.end(), [](const sk::RowParams& r) {
    return r.temperature == 1.5f && r.min_p == 0.0f && r.top_p >= 0.9f && r.top_k == 0;
  }));
  EXPECT_EQ(wide, 2);
  EXPECT_EQ(rows_split_nucleus(split, vocab, params), eligible - wide);
  EXPECT_EQ(rows_split(split, vocab, params), 1);
}

// Every logit shape on vocab sizes around the segment's edges; flat rows have more candidates
// than the list holds and take the one-block passes.
TEST(CudaSamplingNucleus, SameTokensAsTheOneBlockPassOnEveryShape) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(9);
  for (int vocab : {1, 3, 7, 300, 8191, 8192, 8193, 20000, 151936}) {
    SCOPED_TRACE(testing::Message() << "vocab " << vocab);
    std::vector<sk::RowParams> params;
    std::vector<float> logits;
    int kind = 0;
    for (float p : {1.0f, 0.9f, 0.6f, 0.2f}) {
      for (float m : {0.0f, 0.1f}) {
        if (p == 1.0f && m == 0.0f) continue;
        for (int rep = 0; rep < 6; ++rep) {
          params.push_back(params_of(rep % 2 ? 0.7f : 1.3f, 0, p, m, rng(), rng() % 4096));
          logits.resize(params.size() * vocab);
          fill_row(logits.data() + (params.size() - 1) * vocab, vocab, kind++, rng);
        }
      }
    }
    expect_same_tokens(logits, vocab, params);
  }
}

TEST(CudaSamplingNucleus, InfiniteAndNanLogitsAsTheOneBlockPass) {
  KS_REQUIRE_GPU();
  const int vocab = 20000;
  std::vector<sk::RowParams> params;
  for (int r = 0; r < 4; ++r) params.push_back(params_of(0.9f, 0, 0.9f, r == 3 ? 0.05f : 0.0f, 60 + r, r));
  const Sampled split = expect_same_tokens(infinite_and_nan_rows(vocab, 4), vocab, params);
  EXPECT_EQ(split.results[0].status, sk::kRowNoFiniteLogit);
  EXPECT_EQ(split.results[3].status, sk::kRowOk);
  EXPECT_EQ(split.results[3].token % 2, 1);
}

}  // namespace
}  // namespace kestrel
