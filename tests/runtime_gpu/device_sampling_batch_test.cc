// make_sampling_batch (src/runtime/device_sampling_batch.h): per-row parameters, and masked
// tokens equal to what the CPU sampler's apply_min_tokens sets to -inf.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <set>

#include "runtime/device_sampling_batch.h"
#include "sampling/penalties.h"

namespace kestrel {
namespace {

constexpr int kVocab = 100;
const std::vector<int> kEos = {7, 9};

std::unique_ptr<Sequence> make_seq(int64_t id, std::vector<int> prompt, std::vector<int> output,
                                   SamplingParams p, uint64_t seed) {
  auto s = std::make_unique<Sequence>(id, "req", 0, std::move(prompt),
                                      std::make_shared<const SamplingParams>(std::move(p)), seed);
  s->token_ids.insert(s->token_ids.end(), output.begin(), output.end());
  return s;
}

// The ids apply_min_tokens masks for `seq` (the oracle).
std::set<int> masked_by_cpu_sampler(const Sequence& seq) {
  std::vector<float> row(kVocab, 1.5f);
  apply_min_tokens(row, *seq.params, static_cast<size_t>(seq.num_output_tokens()), kEos);
  std::set<int> ids;
  for (int t = 0; t < kVocab; ++t) {
    if (std::isinf(row[t])) ids.insert(t);
  }
  return ids;
}

TEST(DeviceSamplingBatch, RowsFollowTheCpuSamplerSemantics) {
  SamplingParams a;  // min_tokens pending, EOS masked, one stop id outside the vocab
  a.temperature = 0.7f;
  a.top_k = 20;
  a.top_p = 0.9f;
  a.min_p = 0.05f;
  a.min_tokens = 3;
  a.stop_token_ids = {5, 200};
  a.repetition_penalty = 1.2f;
  a.logprobs = 3;
  SamplingParams b;  // min_tokens pending but ignore_eos: stop ids only; presence penalty
  b.min_tokens = 3;
  b.ignore_eos = true;
  b.stop_token_ids = {4};
  b.presence_penalty = 0.5f;
  SamplingParams c;  // min_tokens reached; no penalties
  c.temperature = 0.0f;
  c.min_tokens = 1;
  c.stop_token_ids = {6};

  std::vector<std::unique_ptr<Sequence>> seqs;
  seqs.push_back(make_seq(0, {1, 2, 3}, {40}, a, 111));
  seqs.push_back(make_seq(1, {8, 8}, {41, 42}, b, 222));
  seqs.push_back(make_seq(2, {10}, {43}, c, 333));
  ScheduledBatch batch;
  for (auto& s : seqs) batch.seqs.push_back({s.get(), 1, true});
  // Rows in an order other than the batch's.
  const std::vector<int> sample_seqs = {2, 0, 1};
  const SamplingBatch sb = make_sampling_batch(batch, sample_seqs, kEos, kVocab);

  ASSERT_EQ(sb.num_rows, 3);
  EXPECT_EQ(sb.temperature, (std::vector<float>{0.0f, 0.7f, 1.0f}));
  EXPECT_EQ(sb.top_k, (std::vector<int>{-1, 20, -1}));
  EXPECT_EQ(sb.top_p, (std::vector<float>{1.0f, 0.9f, 1.0f}));
  EXPECT_EQ(sb.min_p, (std::vector<float>{0.0f, 0.05f, 0.0f}));
  EXPECT_EQ(sb.repetition_penalty, (std::vector<float>{1.0f, 1.2f, 1.0f}));
  EXPECT_EQ(sb.presence_penalty, (std::vector<float>{0.0f, 0.0f, 0.5f}));
  EXPECT_EQ(sb.seed, (std::vector<uint64_t>{333, 111, 222}));
  EXPECT_EQ(sb.position, (std::vector<int64_t>{2, 4, 4}));  // the next token's index
  EXPECT_EQ(sb.num_logprobs, (std::vector<int>{-1, 3, -1}));

  // Prompt ids only where repetition_penalty reads them; output ids where any penalty does.
  EXPECT_EQ(sb.prompt_offsets, (std::vector<int>{0, 0, 3, 3}));
  EXPECT_EQ(sb.prompt_tokens, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(sb.output_offsets, (std::vector<int>{0, 0, 1, 3}));
  EXPECT_EQ(sb.output_tokens, (std::vector<int>{40, 41, 42}));

  ASSERT_EQ(sb.masked_offsets.size(), 4u);
  for (int r = 0; r < 3; ++r) {
    const std::set<int> got(sb.masked_tokens.begin() + sb.masked_offsets[r],
                            sb.masked_tokens.begin() + sb.masked_offsets[r + 1]);
    EXPECT_EQ(got, masked_by_cpu_sampler(*seqs[sample_seqs[r]])) << "row " << r;
  }
  EXPECT_EQ(sb.masked_offsets[1] - sb.masked_offsets[0], 0);         // c: min_tokens reached
  EXPECT_EQ(sb.masked_offsets[2] - sb.masked_offsets[1], 3);         // a: 5, 7, 9
  EXPECT_EQ(sb.masked_offsets[3] - sb.masked_offsets[2], 1);         // b: 4
}

}  // namespace
}  // namespace kestrel
