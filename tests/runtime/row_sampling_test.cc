// The vocab-parallel sampler's host side (docs/parallel.md, "Vocab-parallel sampling"):
// which rows it may take (shardable, backend/sampling_batch.h: exactly the rows the device
// sampler's split path takes without a processed copy), and their trip to the other ranks
// in the step message (encode_row_sampling / decode_row_sampling, runtime/tp_protocol.h).
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <limits>

#include "backend/sampling_batch.h"
#include "core/error.h"
#include "runtime/tp_protocol.h"

namespace kestrel {
namespace {

constexpr int kVocab = 1000;

// One row of `p` with no token lists, as make_sampling_batch leaves a row without penalties.
SamplingBatch one_row(const SamplingParams& p, uint64_t seed = 1, int64_t position = 5) {
  SamplingBatch b;
  b.num_rows = 1;
  b.add_row_params(p, seed, position);
  return b;
}

SamplingParams temperature(float t) {
  SamplingParams p;
  p.temperature = t;
  return p;
}

TEST(RowSampling, ShardableRowsAreGreedyOrTemperatureAlone) {
  EXPECT_TRUE(shardable(one_row(temperature(0.0f)), kVocab));
  EXPECT_TRUE(shardable(one_row(temperature(0.6f)), kVocab));
  SamplingParams p = temperature(0.6f);
  p.top_k = kVocab;  // no cut: the device sampler drops it too
  EXPECT_TRUE(shardable(one_row(p), kVocab));

  struct Edit {
    const char* what;
    float t;
    void (*apply)(SamplingParams&);
  };
  const Edit not_shardable[] = {
      {"top_k", 0.6f, [](SamplingParams& q) { q.top_k = 20; }},
      {"top_p", 0.6f, [](SamplingParams& q) { q.top_p = 0.95f; }},
      {"min_p", 0.6f, [](SamplingParams& q) { q.min_p = 0.05f; }},
      {"logprobs, even greedy", 0.0f, [](SamplingParams& q) { q.logprobs = 0; }},
      {"repetition_penalty", 0.6f, [](SamplingParams& q) { q.repetition_penalty = 1.1f; }},
      {"presence_penalty", 0.6f, [](SamplingParams& q) { q.presence_penalty = 0.5f; }},
      {"frequency_penalty", 0.6f, [](SamplingParams& q) { q.frequency_penalty = -0.5f; }},
  };
  for (const Edit& e : not_shardable) {
    SamplingParams q = temperature(e.t);
    e.apply(q);
    EXPECT_FALSE(shardable(one_row(q), kVocab)) << e.what;
  }
  // Greedy rows with a filter set are still greedy: the filters play no part.
  p = temperature(0.0f);
  p.top_k = 20;
  p.top_p = 0.5f;
  EXPECT_TRUE(shardable(one_row(p), kVocab));
}

TEST(RowSampling, TokenListsAndMasksAreNotShardable) {
  SamplingBatch b = one_row(temperature(0.6f));
  b.add_row_params(temperature(0.6f), 2, 6);
  b.num_rows = 2;
  EXPECT_TRUE(shardable(b, kVocab));
  SamplingBatch masked = b;  // min_tokens: EOS masked on row 1
  masked.masked_tokens = {7};
  masked.masked_offsets = {0, 0, 1};
  EXPECT_FALSE(shardable(masked, kVocab));
  masked.masked_offsets = {0, 0, 0};
  masked.masked_tokens.clear();
  EXPECT_TRUE(shardable(masked, kVocab));  // lists present, both empty
  SamplingBatch bias = b;
  bias.bias_tokens = {3};
  bias.bias_values = {1.0f};
  bias.bias_offsets = {0, 1, 1};
  EXPECT_FALSE(shardable(bias, kVocab));
  SamplingBatch structured = b;
  structured.mask_words = (kVocab + 31) / 32;
  structured.allowed_row = {-1, 0};
  structured.allowed_masks.assign(structured.mask_words, ~0u);
  EXPECT_FALSE(shardable(structured, kVocab));
  structured.allowed_row = {-1, -1};
  EXPECT_TRUE(shardable(structured, kVocab));
  EXPECT_FALSE(shardable(SamplingBatch{}, kVocab));  // nothing to sample
}

TEST(RowSampling, RowsSurviveTheStepMessageBitForBit) {
  SamplingBatch b;
  const float temps[] = {0.0f, 0.6f, 1e-30f, 2.5f, std::numeric_limits<float>::denorm_min()};
  const uint64_t seeds[] = {0, 1, (uint64_t{1} << 63) + 5, std::numeric_limits<uint64_t>::max(),
                            0x00000000ffffffffull};
  const int64_t positions[] = {0, 1, 4095, std::numeric_limits<int32_t>::max(), 77};
  for (int r = 0; r < 5; ++r) b.add_row_params(temperature(temps[r]), seeds[r], positions[r]);
  b.num_rows = 5;
  const std::vector<int> words = encode_row_sampling(b);
  ASSERT_EQ(words.size(), 20u);
  const SamplingBatch got = decode_row_sampling(words);
  ASSERT_EQ(got.num_rows, 5);
  for (int r = 0; r < 5; ++r) {
    EXPECT_EQ(std::bit_cast<uint32_t>(got.temperature[r]), std::bit_cast<uint32_t>(temps[r]));
    EXPECT_EQ(got.seed[r], seeds[r]);
    EXPECT_EQ(got.position[r], positions[r]);
  }
  // What the other ranks stage is a plain batch of the same rows.
  EXPECT_TRUE(shardable(got, kVocab));
}

TEST(RowSampling, BadMessagesAreErrors) {
  SamplingBatch b = one_row(temperature(0.6f), 3, int64_t{1} << 31);
  EXPECT_THROW(encode_row_sampling(b), Error);  // a position past the message's i32
  EXPECT_THROW(decode_row_sampling({1, 2, 3}), Error);  // not whole rows
}

}  // namespace
}  // namespace kestrel
