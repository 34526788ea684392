// The sampler's penalties pass alone (sampling_penalties.cu, launch_penalties): the processed
// rows it writes, bit for bit, against the CPU sampler's apply_penalties on the same row, over
// batch sizes and vocabularies that end inside a block's segment, with masked ids and pending
// output tokens (token feedback) in every segment; and its time against the bytes it moves
// (each row read and written once at the copy rate measured here).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/sampling/sampling.h"
#include "sampling/penalties.h"
#include "sampling_test_util.h"

namespace kestrel {
namespace {

namespace sk = sampling_kernels;
using namespace sampling_test;

// Device bytes holding `v`, copied in the backend's stream (non-blocking: the legacy default
// stream's copies would not wait for its kernels, nor its kernels for them).
template <typename T>
Tensor device_copy(CudaBackend& be, const std::vector<T>& v) {
  Tensor t = be.empty(DType::kU8, Shape{static_cast<int64_t>(std::max<size_t>(sizeof(T) * v.size(), 1))});
  if (!v.empty()) {
    EXPECT_EQ(cudaMemcpyAsync(t.data(), v.data(), sizeof(T) * v.size(), cudaMemcpyHostToDevice, be.stream()),
              cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(be.stream()), cudaSuccess);
  }
  return t;
}

// One processed row per batch row (a penalised batch), its entries as the host merge makes
// them: one per distinct id of prompt and output (repetition flag, output count) and masked
// ids. Every other row has a pending output token in feedback slot r, half of them an id the
// entries name.
struct PenalisedBatch {
  std::vector<float> logits;
  std::vector<sk::RowParams> params;
  std::vector<sk::PenaltyEntry> entries;
  std::vector<int32_t> processed_rows, feedback;
  std::vector<float> want;  // the CPU sampler's processed rows
};

PenalisedBatch make_penalised_batch(int n, int vocab, std::mt19937& rng) {
  PenalisedBatch b;
  b.logits.resize(static_cast<size_t>(n) * vocab);
  b.params.resize(n);
  b.feedback.assign(n, 0);
  b.want.resize(b.logits.size());
  for (int r = 0; r < n; ++r) {
    float* row = b.logits.data() + static_cast<size_t>(r) * vocab;
    fill_row(row, vocab, 6, rng);
    SamplingParams sp;
    sp.repetition_penalty = r % 4 == 1 ? 1.0f : 1.05f + 0.1f * static_cast<float>(r % 3);
    sp.presence_penalty = r % 3 == 0 ? 0.0f : 0.5f;
    sp.frequency_penalty = r % 5 == 0 ? 0.0f : 0.3f;
    std::vector<int> prompt, output, masked;
    const int num_prompt = 1 + static_cast<int>(rng() % 600);
    for (int i = 0; i < num_prompt; ++i) prompt.push_back(static_cast<int>(rng() % vocab));
    for (int i = 0; i < 300; ++i) {  // repeats: counts up to 3
      const int id = i % 3 == 2 && !output.empty() ? output[rng() % output.size()] : static_cast<int>(rng() % vocab);
      output.push_back(id);
    }
    for (int i = 0; i < 3; ++i) masked.push_back(static_cast<int>(rng() % vocab));
    sk::RowParams& p = b.params[r];
    p.temperature = 0.7f;
    p.repetition_penalty = sp.repetition_penalty;
    p.presence_penalty = sp.presence_penalty;
    p.frequency_penalty = sp.frequency_penalty;
    p.processed_row = r;
    p.penalty_begin = static_cast<int32_t>(b.entries.size());
    std::vector<int32_t> entry_of(vocab, -1);
    auto entry = [&](int id) -> sk::PenaltyEntry& {
      if (entry_of[id] < 0) {
        entry_of[id] = static_cast<int32_t>(b.entries.size());
        b.entries.push_back(sk::PenaltyEntry{id, 0, 0, 0.0f});
      }
      return b.entries[entry_of[id]];
    };
    for (const std::vector<int>* l : {&prompt, &output}) {
      for (int id : *l) {
        if (sp.repetition_penalty != 1.0f) entry(id).flags |= sk::kPenaltyRepetition;
      }
    }
    if (sp.presence_penalty != 0.0f || sp.frequency_penalty != 0.0f) {
      for (int id : output) ++entry(id).output_count;
    }
    for (int id : masked) entry(id).flags |= sk::kPenaltyMasked;
    p.penalty_end = static_cast<int32_t>(b.entries.size());
    if (r % 2 == 1) {  // pending: a named id, or one spread over the vocabulary
      const int pending = r % 4 == 1 ? b.entries[p.penalty_begin + rng() % (p.penalty_end - p.penalty_begin)].id
                                     : static_cast<int>(rng() % vocab);
      p.pending_slot = r;
      b.feedback[r] = pending;
      output.push_back(pending);
    }
    b.processed_rows.push_back(r);
    // The CPU sampler: min_tokens' masked ids, then the penalties.
    std::vector<float> want(row, row + vocab);
    for (int id : masked) want[id] = -kInf;
    apply_penalties(want, sp, prompt, output);
    std::copy(want.begin(), want.end(), b.want.begin() + static_cast<size_t>(r) * vocab);
  }
  return b;
}

TEST(CudaSamplingPenalties, ProcessedRowsAreTheCpuSamplersOverBatchesAndSegments) {
  KS_REQUIRE_GPU();
  auto& be = dynamic_cast<CudaBackend&>(gpu());
  std::mt19937 rng(41);
  double bandwidth = 0.0;  // bytes read and written a second by a device-to-device copy
  for (const int vocab : {151936, 8192 * 3 + 17, 1000}) {
    for (const int n : {1, 3, 64, 256}) {
      if (vocab != 151936 && n > 3) continue;
      SCOPED_TRACE(testing::Message() << n << " rows of " << vocab);
      PenalisedBatch b = make_penalised_batch(n, vocab, rng);
      const Tensor logits = upload_logits(b.logits, n, vocab);
      const Tensor params = device_copy(be, b.params);
      const Tensor entries = device_copy(be, b.entries);
      const Tensor rows = device_copy(be, b.processed_rows);
      const Tensor feedback = device_copy(be, b.feedback);
      Tensor processed = be.empty(DType::kF32, Shape{n, vocab});
      sk::SampleArgs args;
      args.logits = logits.data_as<float>();
      args.processed = processed.data_as<float>();
      args.rows = params.data_as<sk::RowParams>();
      args.penalties = entries.data_as<sk::PenaltyEntry>();
      args.processed_rows = rows.data_as<int32_t>();
      args.feedback = feedback.data_as<int32_t>();
      args.num_rows = args.num_processed = n;
      args.vocab = vocab;
      sk::launch_penalties(args, be.stream());
      const std::vector<double> got = cuda_test::fetch(processed, be);  // floats exactly
      ASSERT_EQ(got.size(), b.want.size());
      int64_t mismatches = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        const bool same = got[i] == b.want[i] || (std::isnan(got[i]) && std::isnan(b.want[i]));
        if (!same && mismatches++ < 5) {
          ADD_FAILURE() << "row " << i / vocab << " id " << i % vocab << ": " << got[i] << " vs "
                        << b.want[i] << " (raw " << b.logits[i] << ")";
        }
      }
      EXPECT_EQ(mismatches, 0);
      if (vocab != 151936) continue;
      if (bandwidth == 0.0) {
        const size_t bytes = size_t{1} << 30;
        Tensor x = be.empty(DType::kU8, Shape{static_cast<int64_t>(bytes)});
        Tensor y = be.empty(DType::kU8, Shape{static_cast<int64_t>(bytes)});
        const double us = launches_us(be.stream(), [&] {
          cudaMemcpyAsync(y.data(), x.data(), bytes, cudaMemcpyDeviceToDevice, be.stream());
        });
        bandwidth = 2.0 * bytes / (us * 1e-6);
      }
      const double us = launches_us(be.stream(), [&] { sk::launch_penalties(args, be.stream()); });
      const double floor_us = 2.0 * sizeof(float) * n * vocab / bandwidth * 1e6;
      std::printf("[ sampling ] penalties pass, S=%3d V=%d (%zu entries): %7.1f us against %6.1f us "
                  "of bytes at %.0f GB/s\n",
                  n, vocab, b.entries.size(), us, floor_us, bandwidth / 1e9);
    }
  }
  ASSERT_EQ(cudaStreamSynchronize(be.stream()), cudaSuccess);
}

}  // namespace
}  // namespace kestrel
