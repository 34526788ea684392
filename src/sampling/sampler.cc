#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>

#include "core/error.h"
#include "core/philox.h"
#include "sampling/filters.h"
#include "sampling/logprobs.h"
#include "sampling/penalties.h"

namespace kestrel {

namespace {

// The Philox stream of the token draw; other streams of a seed are left for other uses.
constexpr uint32_t kSampleStream = 0;

// Per-thread buffers, sized to the vocab on first use and kept across calls so that a step
// allocates nothing.
struct Workspace {
  std::vector<float> logits;
  PenaltyScratch penalties;
  FilterScratch filters;
};

void validate_row(const SamplingRow& row, size_t index) {
  KS_CHECK(row.params != nullptr, "sampling row {} has no parameters", index);
  const SamplingParams& p = *row.params;
  KS_CHECK(p.temperature >= 0.0f && std::isfinite(p.temperature),
           "row {}: temperature must be >= 0, got {}", index, p.temperature);
  KS_CHECK(p.top_k >= -1, "row {}: top_k must be -1 or >= 0, got {}", index, p.top_k);
  KS_CHECK(p.top_p > 0.0f && p.top_p <= 1.0f, "row {}: top_p must be in (0, 1], got {}", index,
           p.top_p);
  KS_CHECK(p.min_p >= 0.0f && p.min_p <= 1.0f, "row {}: min_p must be in [0, 1], got {}", index,
           p.min_p);
  KS_CHECK(p.repetition_penalty > 0.0f, "row {}: repetition_penalty must be > 0, got {}", index,
           p.repetition_penalty);
  KS_CHECK(!p.logprobs || *p.logprobs >= 0, "row {}: logprobs must be >= 0", index);
  KS_CHECK(row.position >= 0, "row {}: position must be >= 0, got {}", index, row.position);
}

// Structured outputs: every token whose bit is clear (or past the mask) goes to -inf.
void apply_allowed(std::span<float> logits, std::span<const uint32_t> allowed) {
  const size_t covered = std::min(logits.size(), allowed.size() * 32);
  for (size_t t = 0; t < covered; ++t) {
    if (!(allowed[t >> 5] >> (t & 31) & 1u)) logits[t] = -std::numeric_limits<float>::infinity();
  }
  for (size_t t = covered; t < logits.size(); ++t) logits[t] = -std::numeric_limits<float>::infinity();
}

SampledToken sample_row(std::span<const float> raw, const SamplingRow& row, Workspace& ws) {
  const SamplingParams& p = *row.params;
  const size_t num_output = row.output_token_ids.size();
  const bool masks = num_output < static_cast<size_t>(std::max(p.min_tokens, 0));
  std::span<const float> logits = raw;
  if (masks || p.has_logit_processors() || !row.allowed.empty()) {
    ws.logits.assign(raw.begin(), raw.end());
    std::span<float> processed(ws.logits);
    if (!row.allowed.empty()) apply_allowed(processed, row.allowed);
    apply_min_tokens(processed, p, num_output, row.eos_token_ids);
    apply_logit_bias(processed, p);
    apply_penalties(processed, p, row.prompt_token_ids, row.output_token_ids, &ws.penalties);
    logits = processed;
  }

  SampledToken out;
  if (p.greedy()) {
    out.token_id = argmax(logits);
  } else {
    compute_kept_weights(logits, p, ws.filters);
    const float u = uniform01(row.seed, static_cast<uint64_t>(row.position), kSampleStream);
    out.token_id = draw_token(std::span<const float>(ws.filters.weights.data(), raw.size()), u);
  }
  if (p.logprobs) out.logprobs = compute_logprobs(raw, out.token_id, *p.logprobs);
  return out;
}

}  // namespace

std::vector<SampledToken> sample(const float* logits, int vocab,
                                 std::span<const SamplingRow> rows) {
  KS_CHECK(vocab > 0, "sample: vocab must be > 0, got {}", vocab);
  for (size_t i = 0; i < rows.size(); ++i) validate_row(rows[i], i);
  std::vector<SampledToken> out(rows.size());
  if (rows.empty()) return out;
  KS_CHECK(logits != nullptr, "sample: logits are null");

  std::exception_ptr error;
  const int64_t n = static_cast<int64_t>(rows.size());
#pragma omp parallel for schedule(dynamic, 1) if (n > 1)
  for (int64_t r = 0; r < n; ++r) {
    thread_local Workspace ws;
    try {
      const std::span<const float> raw(logits + r * static_cast<int64_t>(vocab), vocab);
      out[r] = sample_row(raw, rows[r], ws);
    } catch (...) {
      // An exception must not cross the OpenMP region; the first one is rethrown below.
#pragma omp critical(kestrel_sample_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  return out;
}

}  // namespace kestrel
