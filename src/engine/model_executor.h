// The seam between the engine (scheduling, pure C++) and whatever runs the model.
#pragma once

#include <optional>
#include <vector>

#include "engine/sequence.h"

namespace kestrel {

struct ScheduledSeq {
  Sequence* seq = nullptr;
  // This step computes tokens [seq->num_computed_tokens, + num_new_tokens).
  int num_new_tokens = 0;
  // True when this step reaches the end of the sequence's tokens: the executor samples the
  // next token from the logits of the last computed position.
  bool sample = false;
};

// One step's work. Block tables already cover every token computed in this step.
struct ScheduledBatch {
  std::vector<ScheduledSeq> seqs;
  int num_tokens = 0;  // sum of num_new_tokens
  bool empty() const { return seqs.empty(); }
};

struct SampledToken {
  int token_id = 0;
  std::optional<TokenLogprobs> logprobs;  // when the sequence asked for logprobs
};

class ModelExecutor {
 public:
  virtual ~ModelExecutor() = default;
  // Runs the model over the batch (writing K/V of the new tokens into the cache) and
  // returns one sampled token for each ScheduledSeq with sample == true, in batch order.
  // Does not modify the sequences.
  virtual std::vector<SampledToken> execute(const ScheduledBatch& batch) = 0;
};

}  // namespace kestrel
