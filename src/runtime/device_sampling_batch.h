// The sampling inputs of one step, flattened for a device sampler (Backend::sample).
//
// Row r describes sequence batch.seqs[sample_seqs[r]] exactly as the CPU path's SamplingRow
// does (src/sampling/sampler.h): its parameters, seed, position (index of the token being
// sampled = the sequence's current length) and, for the logit processors:
//   masked tokens: while the sequence has fewer than min_tokens output tokens, its
//     stop_token_ids and, unless ignore_eos, the model's EOS ids (apply_min_tokens in
//     src/sampling/penalties.cc); ids outside [0, vocab_size) are left out, as there;
//   prompt tokens: only for rows with repetition_penalty != 1 (the only reader);
//   output tokens: only for rows with any penalty (repetition, presence, frequency).
// Leaving the token lists empty where no penalty reads them changes no result and keeps a
// 256-row step from copying ~500k ids.
#pragma once

#include <span>
#include <vector>

#include "backend/sampling_batch.h"
#include "engine/model_executor.h"
#include "runtime/sampled_row.h"

namespace kestrel {

// `view`: as of the step's launch, or after it (deferred sampling; sampled_row.h).
// REQUIRES: every sample_seqs entry indexes batch.seqs and its sequence has params.
SamplingBatch make_sampling_batch(const ScheduledBatch& batch, const std::vector<int>& sample_seqs,
                                  std::span<const int> eos_token_ids, int vocab_size,
                                  RowView view = RowView::kAtLaunch);

}  // namespace kestrel
