// Structured outputs on the device sampler: rows with an allowed-token mask
// (SamplingBatch::allowed_row / allowed_masks) against the CPU sampler given the same mask
// (SamplingRow::allowed), mixed with unmasked rows, penalties, min_tokens masks, greedy,
// plain and filtered rows, on odd vocab sizes.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "core/error.h"
#include "sampling_test_util.h"

namespace kestrel {
namespace {

using namespace cuda_test;
using namespace sampling_test;

struct MaskedCase {
  std::vector<Row> rows;
  std::vector<std::vector<uint32_t>> masks;  // per row; empty: no mask
};

MaskedCase make_case(int vocab, int num_rows, std::mt19937& rng) {
  MaskedCase c;
  const int words = (vocab + 31) / 32;
  std::uniform_int_distribution<int> id(0, vocab - 1);
  for (int r = 0; r < num_rows; ++r) {
    Row row;
    row.params.temperature = r % 4 == 0 ? 0.0f : 1.0f;
    if (r % 5 == 1) row.params.top_k = 20;
    if (r % 5 == 2) row.params.top_p = 0.8f;
    if (r % 7 == 3) {
      for (int i = 0; i < 10; ++i) row.output.push_back(id(rng));
      row.params.frequency_penalty = 0.5f;
      row.masked = {id(rng)};
    }
    row.seed = rng();
    row.position = rng() % 1000;
    std::vector<uint32_t> mask;
    if (r % 3 != 2) {  // two rows in three are constrained
      mask.assign(words, 0);
      const int kind = r % 4;
      if (kind == 0) {  // a handful of tokens, as in a JSON structure state
        for (int i = 0; i < 5; ++i) {
          const int t = id(rng);
          mask[t / 32] |= 1u << (t % 32);
        }
      } else if (kind == 1) {  // one token only
        const int t = id(rng);
        mask[t / 32] |= 1u << (t % 32);
      } else {  // most tokens, as inside a JSON string
        for (int t = 0; t < vocab; ++t) {
          if (rng() % 10 != 0) mask[t / 32] |= 1u << (t % 32);
        }
      }
    }
    c.rows.push_back(std::move(row));
    c.masks.push_back(std::move(mask));
  }
  return c;
}

bool bit(const std::vector<uint32_t>& mask, int t) { return mask.empty() || (mask[t / 32] >> (t % 32) & 1u); }

void check(int vocab, int num_rows, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "vocab " << vocab << " rows " << num_rows);
  std::mt19937 rng(seed);
  MaskedCase c = make_case(vocab, num_rows, rng);
  std::vector<float> logits(size_t(num_rows) * vocab);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& x : logits) x = normal(rng);

  SamplingBatch batch = make_batch(c.rows);
  batch.mask_words = (vocab + 31) / 32;
  batch.allowed_row.assign(num_rows, -1);
  for (int r = 0; r < num_rows; ++r) {
    if (c.masks[r].empty()) continue;
    batch.allowed_row[r] = static_cast<int>(batch.allowed_masks.size() / batch.mask_words);
    batch.allowed_masks.insert(batch.allowed_masks.end(), c.masks[r].begin(), c.masks[r].end());
  }
  const std::vector<SampledToken> got = gpu().sample(upload_logits(logits, num_rows, vocab), batch);

  // CPU reference: the same rows with SamplingRow::allowed.
  std::vector<SamplingRow> cpu(num_rows);
  for (int r = 0; r < num_rows; ++r) {
    Row& row = c.rows[r];
    row.params.stop_token_ids = row.masked;
    row.params.min_tokens = row.masked.empty() ? 0 : static_cast<int>(row.output.size()) + 1;
    cpu[r] = SamplingRow{&row.params, row.seed, row.position, row.prompt, row.output, {}};
    cpu[r].allowed = c.masks[r];
  }
  const std::vector<SampledToken> want = sample(logits.data(), vocab, cpu);
  ASSERT_EQ(got.size(), size_t(num_rows));
  for (int r = 0; r < num_rows; ++r) {
    SCOPED_TRACE(testing::Message() << "row " << r);
    const int token = got[r].token_id;
    ASSERT_TRUE(bit(c.masks[r], token)) << "token " << token << " is not allowed";
    if (token == want[r].token_id) continue;
    ASSERT_FALSE(c.rows[r].params.greedy()) << token << " vs " << want[r].token_id;
    // A near-tie of the draw, judged on the logits with the mask applied.
    std::vector<float> masked(logits.begin() + size_t(r) * vocab, logits.begin() + size_t(r + 1) * vocab);
    for (int t = 0; t < vocab; ++t) {
      if (!bit(c.masks[r], t)) masked[t] = -kInf;
    }
    ASSERT_TRUE(is_near_tie(masked, c.rows[r], token)) << token << " vs " << want[r].token_id;
  }
}

TEST(CudaStructuredMask, MaskedRowsMatchTheCpuSampler) {
  KS_REQUIRE_GPU();
  check(1000, 7, 1);
  check(151936, 16, 2);
  check(33, 5, 3);    // a partial last mask word
  check(4099, 256, 4);
}

TEST(CudaStructuredMask, BadMasksAreErrors) {
  KS_REQUIRE_GPU();
  std::vector<Row> rows(2);
  SamplingBatch batch = make_batch(rows);
  batch.mask_words = 3;  // vocab 100 needs 4
  batch.allowed_row = {0, -1};
  batch.allowed_masks.assign(3, ~0u);
  std::vector<float> logits(200, 0.0f);
  EXPECT_THROW(gpu().sample(upload_logits(logits, 2, 100), batch), Error);
  batch.mask_words = 4;
  batch.allowed_masks.assign(4, ~0u);
  batch.allowed_row = {0, 1};  // only one mask row
  EXPECT_THROW(gpu().sample(upload_logits(logits, 2, 100), batch), Error);
  batch.allowed_masks.clear();
  batch.allowed_row = {0, -1};  // a row pointing at no mask at all
  EXPECT_THROW(gpu().sample(upload_logits(logits, 2, 100), batch), Error);
}

}  // namespace
}  // namespace kestrel
