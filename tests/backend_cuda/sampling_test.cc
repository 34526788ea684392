// The device sampler (CudaBackend::sample) against the CPU sampler (src/sampling, the
// reference) over every combination of temperature, top_k, top_p and min_p, with penalties,
// masks and logprobs mixed in, on odd vocab sizes and batch sizes; plus hand-derived cases
// and errors. The timing is in sampling_timing_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "sampling_test_util.h"

namespace kestrel {
namespace {

using namespace cuda_test;
using namespace sampling_test;

// Every combination of the filter parameters; penalties, masks, logprobs, the logit shape,
// seed and position vary along with them.
std::vector<Row> combinations(int vocab, std::mt19937& rng) {
  std::vector<Row> rows;
  int n = 0;
  for (float t : {0.0f, 0.7f, 1.0f, 1.8f}) {
    for (int k : {-1, 1, 5, 50, 3000, 20000}) {
      for (float p : {1.0f, 0.95f, 0.6f, 0.3f}) {
        for (float m : {0.0f, 0.05f}) {
          Row row;
          row.params.temperature = t;
          row.params.top_k = k;
          row.params.top_p = p;
          row.params.min_p = m;
          row.seed = (static_cast<uint64_t>(rng()) << 32) | rng();
          row.position = rng() % 5000;
          const int logprobs[] = {-1, 0, 3, 20, -1};
          if (logprobs[n % 5] >= 0) row.params.logprobs = logprobs[n % 5];
          std::uniform_int_distribution<int> id(0, vocab - 1);
          if (n % 3 == 1 || n % 3 == 2) {
            for (int i = 0; i < 40; ++i) row.prompt.push_back(id(rng));
            for (int i = 0; i < 12; ++i) row.output.push_back(i % 3 == 0 ? row.prompt[i] : id(rng));
            row.params.repetition_penalty = 1.3f;
          }
          if (n % 3 == 2) {
            row.params.frequency_penalty = 0.4f;
            row.params.presence_penalty = -0.3f;
            if (vocab > 3) row.masked = {id(rng), id(rng), vocab + 5};
          }
          if (n % 4 == 3) {  // logit_bias: up to 4 distinct ids, some of them penalised or masked
            std::uniform_real_distribution<float> bias(-3.0f, 3.0f);
            for (int i = 0; i < 4 && i < vocab; ++i) {
              const int t = i == 0 && !row.output.empty() ? row.output[0]
                            : i == 1 && !row.masked.empty() ? row.masked[0]
                                                            : id(rng);
              const bool seen = std::any_of(row.params.logit_bias.begin(), row.params.logit_bias.end(),
                                            [&](const auto& e) { return e.first == t; });
              if (!seen) row.params.logit_bias.emplace_back(t, bias(rng));
            }
          }
          rows.push_back(std::move(row));
          ++n;
        }
      }
    }
  }
  return rows;
}

TEST(CudaSampling, MatchesCpuSamplerOnEveryCombination) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(1234);
  Tally tally;
  // KESTREL_SAMPLING_QUICK: a smaller sweep, for runs under compute-sanitizer.
  const bool quick = std::getenv("KESTREL_SAMPLING_QUICK") != nullptr;
  const std::vector<int> vocabs = quick ? std::vector<int>{7, 1000, 20000}
                                        : std::vector<int>{1, 7, 1000, 151936};
  const std::vector<int> batches = quick ? std::vector<int>{64} : std::vector<int>{1, 3, 64, 256};
  int pass = 0;  // shifts the logit shape each combination meets from one pass to the next
  for (int vocab : vocabs) {
    std::vector<Row> all = combinations(vocab, rng);
    for (int batch : batches) {
      // Cover every combination, in batches of `batch` rows (the last batch wraps around).
      const int num = static_cast<int>(all.size());
      const int num_batches = (num + batch - 1) / batch;
      ++pass;
      for (int b = 0; b < num_batches; ++b) {
        std::vector<Row> rows;
        std::vector<float> logits(static_cast<size_t>(batch) * vocab);
        for (int r = 0; r < batch; ++r) {
          const int combination = (b * batch + r) % num;
          rows.push_back(all[combination]);
          fill_row(logits.data() + static_cast<size_t>(r) * vocab, vocab, combination + pass, rng);
        }
        compare(logits, vocab, rows, tally,
                "vocab " + std::to_string(vocab) + " batch " + std::to_string(batch));
        if (HasFatalFailure()) return;
      }
    }
  }
  std::printf("[ sampling ] %d rows compared with the CPU sampler, %d near-ties\n", tally.rows,
              tally.near_ties);
  EXPECT_LE(tally.near_ties * 1000, tally.rows) << "too many near-ties";
}

// Plain rows (greedy or temperature alone: the split path, many blocks per row) on vocab
// sizes around the chunk edges and the full vocab, alone and batched, some penalised or
// masked, mixed with rows that need the one-block path in the same call.
TEST(CudaSampling, PlainRowsMatchCpuSampler) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(77);
  Tally tally;
  const float temps[] = {0.0f, 0.6f, 1.0f, 1.8f, 0.3f};
  int n = 0;
  auto make_row = [&](int vocab) {
    Row row = row_with(temps[n % 5]);
    row.seed = (static_cast<uint64_t>(rng()) << 32) | rng();
    row.position = rng() % 5000;
    std::uniform_int_distribution<int> id(0, vocab - 1);
    if (n % 4 == 3) {
      for (int i = 0; i < 30; ++i) row.prompt.push_back(id(rng));
      for (int i = 0; i < 10; ++i) row.output.push_back(id(rng));
      row.params.repetition_penalty = 1.2f;
      row.params.frequency_penalty = 0.3f;
      row.params.presence_penalty = 0.2f;
      if (vocab > 3) row.masked = {id(rng)};
    }
    if (n % 7 == 6) row.params.top_p = 0.9f;  // one-block path, same batch
    ++n;
    return row;
  };
  struct Case {
    int vocab, batch, calls;
  };
  const Case cases[] = {{1, 3, 2},     {7, 1, 6},     {255, 3, 4},  {256, 64, 2},  {257, 1, 6},
                        {1000, 64, 2}, {4097, 3, 6},  {151936, 1, 12}, {151936, 3, 4},
                        {151936, 256, 3}};
  for (const Case& c : cases) {
    for (int call = 0; call < c.calls; ++call) {
      std::vector<Row> rows;
      std::vector<float> logits(static_cast<size_t>(c.batch) * c.vocab);
      for (int r = 0; r < c.batch; ++r) {
        rows.push_back(make_row(c.vocab));
        fill_row(logits.data() + static_cast<size_t>(r) * c.vocab, c.vocab, n + call, rng);
      }
      compare(logits, c.vocab, rows, tally,
              "vocab " + std::to_string(c.vocab) + " batch " + std::to_string(c.batch));
      if (HasFatalFailure()) return;
    }
  }
  std::printf("[ sampling ] %d plain-path rows compared with the CPU sampler, %d near-ties\n",
              tally.rows, tally.near_ties);
  EXPECT_LE(tally.near_ties * 1000, tally.rows) << "too many near-ties";
}

// Tokens drawn over `draws` seeds for one row of logits.
std::vector<int> draws_over_seeds(const std::vector<float>& logits, Row row, int draws) {
  std::vector<Row> rows;
  std::vector<float> all;
  for (int i = 0; i < draws; ++i) {
    row.seed = 1000 + i;
    rows.push_back(row);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  std::vector<int> tokens;
  for (const SampledToken& t : gpu_sample(all, static_cast<int>(logits.size()), rows)) {
    tokens.push_back(t.token_id);
  }
  return tokens;
}

TEST(CudaSampling, GreedyTiesGoToTheLowestId) {
  KS_REQUIRE_GPU();
  const int vocab = 151936;
  std::vector<float> logits(3 * vocab, -1.0f);
  logits[7000] = logits[90000] = 4.0f;                 // row 0: tie at the max
  std::fill(logits.begin() + vocab, logits.begin() + 2 * vocab, -kInf);  // row 1: all -inf
  logits[2 * vocab + vocab - 1] = 0.5f;                // row 2: the last id
  std::vector<Row> rows(3, row_with(0.0f));
  const std::vector<SampledToken> got = gpu_sample(logits, vocab, rows);
  EXPECT_EQ(got[0].token_id, 7000);
  EXPECT_EQ(got[1].token_id, 0);
  EXPECT_EQ(got[2].token_id, vocab - 1);
}

TEST(CudaSampling, TopKKeepsEveryTieAtTheKthValue) {
  KS_REQUIRE_GPU();
  // top_k = 2 over [5, 1, 5, 5, 0]: the k-th value is 5, so ids 0, 2 and 3 stay.
  std::vector<int> tokens = draws_over_seeds({5, 1, 5, 5, 0}, row_with(1.0f, 2), 300);
  for (int t : tokens) ASSERT_TRUE(t == 0 || t == 2 || t == 3) << t;
  for (int want : {0, 2, 3}) EXPECT_NE(std::count(tokens.begin(), tokens.end(), want), 0) << want;
}

TEST(CudaSampling, TopPBreaksEqualProbabilitiesByLowerId) {
  KS_REQUIRE_GPU();
  // Four equal probabilities: top_p 0.5 keeps ids {0, 1}, top_p 0.6 keeps {0, 1, 2}.
  const std::vector<float> flat(4, 0.25f);
  for (auto [p, kept] : {std::pair{0.5f, 2}, std::pair{0.6f, 3}}) {
    std::vector<int> tokens = draws_over_seeds(flat, row_with(1.0f, -1, p), 300);
    for (int t : tokens) ASSERT_LT(t, kept) << "top_p " << p;
    for (int want = 0; want < kept; ++want) {
      EXPECT_NE(std::count(tokens.begin(), tokens.end(), want), 0) << "top_p " << p;
    }
  }
}

TEST(CudaSampling, DrawIsTheInverseCdfInIdOrder) {
  KS_REQUIRE_GPU();
  // Weights 1 : 2 : 3 (logits log 1, log 2, log 3 at T = 1); u < 1/6 -> 0, < 1/2 -> 1, else 2.
  const std::vector<float> logits{0.0f, std::log(2.0f), std::log(3.0f)};
  Row row = row_with(1.0f);
  row.position = 17;
  const std::vector<int> tokens = draws_over_seeds(logits, row, 200);
  for (int i = 0; i < 200; ++i) {
    const double u = uniform01(1000 + i, 17, 0);
    if (std::fabs(u - 1.0 / 6) < 1e-5 || std::fabs(u - 0.5) < 1e-5) continue;
    EXPECT_EQ(tokens[i], u < 1.0 / 6 ? 0 : u < 0.5 ? 1 : 2) << "u " << u;
  }
}

TEST(CudaSampling, DrawCrossesChunksInIdOrder) {
  KS_REQUIRE_GPU();
  // Weights 1 : 2 : 3 on ids 5, 700 and 151000 of a full vocab, every other id -inf:
  // u < 1/6 -> 5, < 1/2 -> 700, else 151000 (the ids lie in different chunks and blocks).
  std::vector<float> logits(151936, -kInf);
  logits[5] = 0.0f;
  logits[700] = std::log(2.0f);
  logits[151000] = std::log(3.0f);
  Row row = row_with(1.0f);
  row.position = 23;
  const std::vector<int> tokens = draws_over_seeds(logits, row, 64);
  for (int i = 0; i < 64; ++i) {
    const double u = uniform01(1000 + i, 23, 0);
    if (std::fabs(u - 1.0 / 6) < 1e-5 || std::fabs(u - 0.5) < 1e-5) continue;
    EXPECT_EQ(tokens[i], u < 1.0 / 6 ? 5 : u < 0.5 ? 700 : 151000) << "u " << u;
  }
}

TEST(CudaSampling, PenaltiesAndMasksByHand) {
  KS_REQUIRE_GPU();
  const std::vector<float> logits{2.0f, -2.0f, 1.0f, 0.5f};
  // repetition 2 on ids 0, 1: [1, -4, 1, 0.5] -> greedy 0 (tie with 2, lower id).
  Row a = row_with(0.0f);
  a.params.repetition_penalty = 2.0f;
  a.prompt = {0, 1, 1};
  // ... then output {0, 0} with frequency 0.3, presence 0.5: id 0 = 1 - 0.6 - 0.5 -> 2 wins.
  Row b = a;
  b.output = {0, 0};
  b.params.frequency_penalty = 0.3f;
  b.params.presence_penalty = 0.5f;
  // ... and id 2 masked: 3 (0.5) wins over 0 (-0.1).
  Row c = b;
  c.masked = {2, 99};
  std::vector<float> three;
  for (int i = 0; i < 3; ++i) three.insert(three.end(), logits.begin(), logits.end());
  const std::vector<SampledToken> got = gpu_sample(three, 4, {a, b, c});
  EXPECT_EQ(got[0].token_id, 0);
  EXPECT_EQ(got[1].token_id, 2);
  EXPECT_EQ(got[2].token_id, 3);
}

// logit_bias after the min_tokens mask and before the penalties, as the CPU sampler.
TEST(CudaSampling, LogitBiasByHand) {
  KS_REQUIRE_GPU();
  const std::vector<float> logits{2.0f, -2.0f, 1.0f, 0.5f};
  Row a = row_with(0.0f);
  a.params.logit_bias = {{3, 2.0f}};  // 2.5 > 2
  Row b = row_with(0.0f);
  b.params.logit_bias = {{0, -100.0f}};  // id 2 next
  // Biased first: id 0 (in the output) is (2 + 2) / 2 = 2 < 2.5 = id 3 (+2); the other order
  // would give id 0 3.
  Row c = row_with(0.0f);
  c.params.logit_bias = {{0, 2.0f}, {3, 2.0f}};
  c.params.repetition_penalty = 2.0f;
  c.output = {0};
  // A masked id stays masked under +100.
  Row d = row_with(0.0f);
  d.masked = {0};
  d.output = {1};
  d.params.logit_bias = {{0, 100.0f}};
  std::vector<float> four;
  for (int i = 0; i < 4; ++i) four.insert(four.end(), logits.begin(), logits.end());
  const std::vector<SampledToken> got = gpu_sample(four, 4, {a, b, c, d});
  EXPECT_EQ(got[0].token_id, 3);
  EXPECT_EQ(got[1].token_id, 2);
  EXPECT_EQ(got[2].token_id, 3);
  EXPECT_EQ(got[3].token_id, 2);
}

TEST(CudaSampling, LogprobsByHand) {
  KS_REQUIRE_GPU();
  // Raw logits [0, log 3, -inf]: probabilities 1/4, 3/4, 0.
  Row row = row_with(0.0f);
  row.params.logprobs = 5;
  const std::vector<SampledToken> got = gpu_sample({0.0f, std::log(3.0f), -kInf}, 3, {row});
  ASSERT_TRUE(got[0].logprobs.has_value());
  const TokenLogprobs& lp = *got[0].logprobs;
  EXPECT_EQ(lp.token_id, 1);
  EXPECT_NEAR(lp.logprob, std::log(0.75), 1e-6);
  EXPECT_EQ(lp.rank, 1);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 1);
  EXPECT_EQ(lp.top[1].first, 0);
  EXPECT_NEAR(lp.top[1].second, std::log(0.25), 1e-6);
  EXPECT_EQ(lp.top[2].first, 2);
  EXPECT_EQ(lp.top[2].second, -kInf);
}

// Prompt logprobs on the device (Backend::token_logprobs): for every row kind (spread, peaked,
// ties, -inf holes, all equal, wide), given tokens (the row's best, a random one, one at
// -inf where the row has them) and top counts 0..20, the CPU's compute_logprobs: the same
// rank and top ids, values within 1e-4.
TEST(CudaSampling, TokenLogprobsMatchTheCpu) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(41);
  for (const int vocab : {7, 1000, 151936}) {
    for (const int num_top : {0, 1, 5, 20}) {
      const int rows = 12;
      std::vector<float> logits(static_cast<size_t>(rows) * vocab);
      std::vector<int> tokens(rows);
      for (int r = 0; r < rows; ++r) {
        float* row = logits.data() + static_cast<size_t>(r) * vocab;
        fill_row(row, vocab, r % 6, rng);
        const int best = static_cast<int>(std::max_element(row, row + vocab) - row);
        tokens[r] = r % 3 == 0 ? best : static_cast<int>(rng() % vocab);
        if (r % 3 == 2) {  // a token at -inf, where the row has one
          for (int j = 0; j < vocab; ++j) {
            if (std::isinf(row[j])) tokens[r] = j;
          }
        }
      }
      Tensor host = Tensor::host(DType::kF32, Shape{rows, vocab});
      std::copy(logits.begin(), logits.end(), host.data_as<float>());
      const std::vector<TokenLogprobs> got =
          gpu().token_logprobs(gpu().upload(host, DType::kF32), tokens, num_top);
      ASSERT_EQ(got.size(), static_cast<size_t>(rows));
      for (int r = 0; r < rows; ++r) {
        SCOPED_TRACE("vocab " + std::to_string(vocab) + ", top " + std::to_string(num_top) +
                     ", row " + std::to_string(r));
        const std::span<const float> row(logits.data() + static_cast<size_t>(r) * vocab,
                                         static_cast<size_t>(vocab));
        const TokenLogprobs want = compute_logprobs(row, tokens[r], num_top);
        EXPECT_EQ(got[r].token_id, tokens[r]);
        if (std::isinf(want.logprob)) {
          EXPECT_EQ(got[r].logprob, want.logprob);
        } else {
          EXPECT_NEAR(got[r].logprob, want.logprob, 1e-4);
        }
        EXPECT_EQ(got[r].rank, want.rank);
        ASSERT_EQ(got[r].top.size(), want.top.size());
        for (size_t i = 0; i < want.top.size(); ++i) {
          EXPECT_EQ(got[r].top[i].first, want.top[i].first) << "top " << i;
          if (std::isinf(want.top[i].second)) {
            EXPECT_EQ(got[r].top[i].second, want.top[i].second) << "top " << i;
          } else {
            EXPECT_NEAR(got[r].top[i].second, want.top[i].second, 1e-4) << "top " << i;
          }
        }
      }
    }
  }
  // Bad input: a token outside the vocabulary, rows and tokens that disagree, a row with no
  // finite logit.
  Tensor host = Tensor::host(DType::kF32, Shape{1, 3});
  std::fill_n(host.data_as<float>(), 3, 0.5f);
  const Tensor dev = gpu().upload(host, DType::kF32);
  EXPECT_THROW(gpu().token_logprobs(dev, std::vector<int>{3}, 1), Error);
  EXPECT_THROW(gpu().token_logprobs(dev, std::vector<int>{0, 1}, 1), Error);
  std::fill_n(host.data_as<float>(), 3, -kInf);
  EXPECT_THROW(gpu().token_logprobs(gpu().upload(host, DType::kF32), std::vector<int>{0}, 1), Error);
}

TEST(CudaSampling, RejectsBadInput) {
  KS_REQUIRE_GPU();
  const std::vector<float> ok{0.0f, 1.0f};
  EXPECT_THROW(gpu_sample({-kInf, -kInf}, 2, {row_with(1.0f)}), Error);  // no finite logit
  Row lp = row_with(0.0f);
  lp.params.logprobs = 0;
  EXPECT_THROW(gpu_sample({-kInf, -kInf}, 2, {lp}), Error);
  EXPECT_THROW(gpu_sample(ok, 2, {row_with(1.0f, -2)}), Error);
  EXPECT_THROW(gpu_sample(ok, 2, {row_with(1.0f, -1, 0.0f)}), Error);
  EXPECT_THROW(gpu_sample(ok, 2, {row_with(-1.0f)}), Error);
  Row bad_id = row_with(1.0f);
  bad_id.params.repetition_penalty = 1.2f;
  bad_id.prompt = {2};
  EXPECT_THROW(gpu_sample(ok, 2, {bad_id}), Error);
  SamplingBatch b;  // rows without their parameters
  b.num_rows = 1;
  Tensor host = Tensor::host(DType::kF32, Shape{1, 2});
  host.data_as<float>()[1] = 1.0f;
  EXPECT_THROW(gpu().sample(gpu().upload(host, DType::kF32), b), Error);
  EXPECT_THROW(gpu().sample(gpu().upload(host, DType::kBF16), b), Error);  // BF16 logits
}

}  // namespace
}  // namespace kestrel
