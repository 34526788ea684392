#include "sampling/penalties.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace kestrel {

namespace {

void check_ids(std::span<const int> ids, size_t vocab, const char* what) {
  for (int t : ids) {
    KS_CHECK(t >= 0 && static_cast<size_t>(t) < vocab,
             "{} token id {} is outside the vocab [0, {})", what, t, vocab);
  }
}

}  // namespace

void apply_min_tokens(std::span<float> logits, const SamplingParams& params,
                      size_t num_output_tokens, std::span<const int> eos_token_ids) {
  if (num_output_tokens >= static_cast<size_t>(std::max(params.min_tokens, 0))) return;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  auto mask = [&](std::span<const int> ids) {
    for (int t : ids) {
      if (t >= 0 && static_cast<size_t>(t) < logits.size()) logits[t] = kNegInf;
    }
  };
  mask(params.stop_token_ids);
  if (!params.ignore_eos) mask(eos_token_ids);
}

void apply_logit_bias(std::span<float> logits, const SamplingParams& params) {
  for (const auto& [id, bias] : params.logit_bias) {
    if (id >= 0 && static_cast<size_t>(id) < logits.size()) logits[id] += bias;
  }
}

bool has_penalties(const SamplingParams& params) { return params.has_penalties(); }

void apply_penalties(std::span<float> logits, const SamplingParams& params,
                     std::span<const int> prompt_token_ids, std::span<const int> output_token_ids,
                     PenaltyScratch* scratch) {
  if (!has_penalties(params)) return;
  const size_t vocab = logits.size();
  check_ids(prompt_token_ids, vocab, "prompt");
  check_ids(output_token_ids, vocab, "output");
  PenaltyScratch local;
  PenaltyScratch& s = scratch != nullptr ? *scratch : local;

  const float rep = params.repetition_penalty;
  if (rep != 1.0f) {
    KS_CHECK(rep > 0.0f, "repetition_penalty must be > 0, got {}", rep);
    s.seen.resize(vocab, 0);
    // Each distinct id is penalised once, however often it occurs (HF gathers and
    // scatters by id).
    auto penalise = [&](std::span<const int> ids) {
      for (int t : ids) {
        if (s.seen[t]) continue;
        s.seen[t] = 1;
        const float l = logits[t];
        logits[t] = l > 0.0f ? l / rep : l * rep;
      }
    };
    penalise(prompt_token_ids);
    penalise(output_token_ids);
    for (int t : prompt_token_ids) s.seen[t] = 0;
    for (int t : output_token_ids) s.seen[t] = 0;
  }

  const float presence = params.presence_penalty;
  const float frequency = params.frequency_penalty;
  if (presence != 0.0f || frequency != 0.0f) {
    s.counts.resize(vocab, 0);
    for (int t : output_token_ids) ++s.counts[t];
    // Resetting a count when it is applied both dedups the ids and leaves the scratch zero.
    for (int t : output_token_ids) {
      const int32_t c = s.counts[t];
      if (c == 0) continue;
      logits[t] -= frequency * static_cast<float>(c);
      logits[t] -= presence;
      s.counts[t] = 0;
    }
  }
}

}  // namespace kestrel
