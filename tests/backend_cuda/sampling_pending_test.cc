// An output id pending_token(slot) in a SamplingBatch (token feedback on): the device sampler's
// penalties count the token the last sampling launch wrote to that slot, as the CPU sampler
// counts it when the id is known (docs/engine.md, "Settling first"). The first call samples
// known tokens into the feedback slots; the second samples penalised rows whose output lists
// end in those slots' pending ids, against the CPU sampler with the tokens in their place.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <span>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "core/error.h"
#include "sampling_test_util.h"

namespace kestrel {
namespace {

using namespace sampling_test;

constexpr int kVocab = 5000;

// Greedy rows whose argmax is tokens[r]: the call leaves tokens[r] in feedback slot r.
void fill_feedback(Backend& be, const std::vector<int>& tokens) {
  std::vector<float> logits(tokens.size() * kVocab, 0.0f);
  std::vector<Row> rows(tokens.size());
  for (size_t r = 0; r < tokens.size(); ++r) {
    logits[r * kVocab + tokens[r]] = 5.0f;
    rows[r].params.temperature = 0.0f;
  }
  const Tensor dev = be.upload([&] {
    Tensor host = Tensor::host(DType::kF32, Shape{static_cast<int64_t>(tokens.size()), kVocab});
    std::copy(logits.begin(), logits.end(), host.data_as<float>());
    return host;
  }(), DType::kF32);
  const std::vector<SampledToken> got = be.sample(dev, make_batch(rows));
  for (size_t r = 0; r < tokens.size(); ++r) ASSERT_EQ(got[r].token_id, tokens[r]);
}

TEST(CudaSamplingPending, PendingOutputTokensCountAsOutputIds) {
  KS_REQUIRE_GPU();
  std::unique_ptr<Backend> be = make_cuda_backend(0);
  ASSERT_TRUE(be->enable_token_feedback(64));
  std::mt19937 rng(5);
  // Slot r holds pending[r]: ids the penalties below must count.
  std::vector<int> pending(16);
  for (int& t : pending) t = static_cast<int>(rng() % kVocab);
  fill_feedback(*be, pending);
  if (HasFatalFailure()) return;

  // Row r's pending token is pending[r]; its logit leads the row by 0.5, so a greedy row picks
  // it unless the penalties count it. Rows vary in which penalty applies and whether the
  // pending id is also a listed output or prompt id (the host merge's entry) or not.
  std::vector<Row> cpu_rows, gpu_rows;
  std::vector<float> logits(pending.size() * kVocab);
  for (size_t r = 0; r < pending.size(); ++r) {
    fill_row(logits.data() + r * kVocab, kVocab, 0, rng);
    logits[r * kVocab + pending[r]] = 6.0f;
    logits[r * kVocab + (pending[r] + 1) % kVocab] = 5.5f;
    Row row;
    row.params.temperature = r % 4 == 3 ? 0.8f : 0.0f;
    row.seed = 100 + r;
    row.position = 40 + static_cast<int64_t>(r);
    switch (r % 3) {
      case 0: row.params.frequency_penalty = 1.0f; break;
      case 1: row.params.presence_penalty = 0.9f; break;
      default: row.params.repetition_penalty = 2.0f; break;
    }
    for (int i = 0; i < 20; ++i) row.prompt.push_back(static_cast<int>(rng() % kVocab));
    if (r % 2 == 1) row.output.push_back(pending[r]);  // also an entry of the host merge
    if (r % 5 == 2) row.output.push_back(static_cast<int>(rng() % kVocab));
    Row gpu_row = row;
    row.output.push_back(pending[r]);
    gpu_row.output.push_back(-1 - static_cast<int>(r));  // pending_token(r)
    cpu_rows.push_back(row);
    gpu_rows.push_back(gpu_row);
  }
  const Tensor dev = be->upload([&] {
    Tensor host = Tensor::host(DType::kF32, Shape{static_cast<int64_t>(pending.size()), kVocab});
    std::copy(logits.begin(), logits.end(), host.data_as<float>());
    return host;
  }(), DType::kF32);
  const std::vector<SampledToken> got = be->sample(dev, make_batch(gpu_rows));
  const std::vector<SampledToken> want = cpu_sample(logits, kVocab, cpu_rows);
  for (size_t r = 0; r < pending.size(); ++r) {
    SCOPED_TRACE(testing::Message() << "row " << r);
    if (got[r].token_id != want[r].token_id) {
      ASSERT_NE(cpu_rows[r].params.temperature, 0.0f) << "greedy " << got[r].token_id << " vs " << want[r].token_id;
      EXPECT_TRUE(is_near_tie(std::span<const float>(logits.data() + r * kVocab, kVocab), cpu_rows[r],
                              got[r].token_id));
    }
    if (cpu_rows[r].params.temperature == 0.0f) EXPECT_NE(got[r].token_id, pending[r]);
  }
  // A pending id past the feedback buffer's slots is an error naming it, and the backend
  // samples on after it.
  gpu_rows[0].output.back() = -1000;
  EXPECT_THROW(be->sample(dev, make_batch(gpu_rows)), Error);
  gpu_rows[0].output.back() = -1;
  EXPECT_NO_THROW(be->sample(dev, make_batch(gpu_rows)));
}

}  // namespace
}  // namespace kestrel
