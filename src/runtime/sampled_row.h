// What a step's sampled row of a sequence samples after, for both samplers' inputs
// (make_sampling_batch, ModelRunner's host sampling): the sequence's tokens as of the step's
// launch, also when its sampling is launched later (ModelExecutor::launch_sampling).
#pragma once

#include <cstdint>
#include <span>

#include "core/error.h"
#include "engine/sequence.h"

namespace kestrel {

enum class RowView {
  // The step is being launched: every token of the sequence precedes its row.
  kAtLaunch,
  // The step was launched and the one before it settled (deferred sampling): the sequence
  // ends in the row's own placeholder (Scheduler::on_launched), which is left out. A sequence
  // the step before ended has none left; its row's token is dropped, so it samples
  // unconstrained.
  kLaunched,
};

struct RowTokens {
  int64_t position = 0;          // index of the token being sampled
  std::span<const int> output;   // the output ids before it
  bool constrained = false;      // the row takes its sequence's constraint mask
  int own_pending = 0;           // the sequence's placeholders that are this row's own (0 or 1)
};

inline RowTokens row_tokens(const Sequence& seq, RowView view) {
  RowTokens t;
  if (view == RowView::kLaunched) {
    KS_ASSERT(seq.num_pending_tokens <= 1, "seq {}: deferred sampling with {} pending tokens",
              seq.seq_id, seq.num_pending_tokens);
    t.own_pending = seq.num_pending_tokens;
  }
  t.position = seq.num_tokens() - t.own_pending;
  t.output = seq.output_token_ids().first(static_cast<size_t>(seq.num_output_tokens() - t.own_pending));
  t.constrained = seq.constraint != nullptr &&
                  (view == RowView::kAtLaunch || seq.status == SequenceStatus::kRunning);
  return t;
}

}  // namespace kestrel
