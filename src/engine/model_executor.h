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

// A token id that is not known yet when its step is launched (the engine's overlap,
// llm_engine.h): the token the previous launch samples for its sampled row `row` (rows in
// batch order of the sequences with sample == true).
constexpr int pending_token(int row) { return -1 - row; }
constexpr bool is_pending_token(int id) { return id < 0; }
constexpr int pending_row(int id) { return -1 - id; }

class ModelExecutor {
 public:
  virtual ~ModelExecutor() = default;
  // Runs the model over the batch (writing K/V of the new tokens into the cache) and
  // returns one sampled token for each ScheduledSeq with sample == true, in batch order.
  // Does not modify the sequences, except that for a sequence that computes_prompt_logprobs()
  // it appends to Sequence::prompt_logprobs the entries of the prompt positions this step
  // computes beyond those it holds (before launch() returns, so the next step's batch sees
  // them). Every token id is known (no pending_token).
  virtual std::vector<SampledToken> execute(const ScheduledBatch& batch) = 0;

  // The overlapped form, used only when supports_overlap(): launch() starts the step and may
  // return before it is done; collect() returns the tokens of the oldest launched step not
  // yet collected, waiting for it. At most two steps are launched and not collected. A
  // sequence's token ids may end in pending_token(r) placeholders for what the previous
  // launch samples: launch() must feed that step's row r token in their place.
  virtual bool supports_overlap() const { return false; }
  // Whether launch() also feeds pending tokens into what its sampler reads of a sequence's
  // output ids (penalties count them). When false, the engine settles a step before it
  // schedules the next one for a sequence with penalties.
  virtual bool samples_pending_tokens() const { return false; }
  virtual void launch(const ScheduledBatch& batch) { launched_.push_back(execute(batch)); }
  // launch() in two parts, used only when supports_deferred_sampling(): launch_forward()
  // starts the step's model work, and launch_sampling(), called once the step before it is
  // collected and settled, its sampling. What the sampler reads of a sequence (its
  // constraint's mask, its output ids) is then taken as of the step's launch, without the
  // placeholder Scheduler::on_launched gave it (sampled_row.h in the runtime). The engine
  // does this where a row's sampling needs the token of the step before (structured
  // outputs), so that the forward still overlaps the host's work. No other launch comes
  // between the two.
  virtual bool supports_deferred_sampling() const { return false; }
  virtual void launch_forward(const ScheduledBatch& batch) { launch(batch); }
  virtual void launch_sampling(const ScheduledBatch& batch) {}
  virtual std::vector<SampledToken> collect() {
    std::vector<SampledToken> tokens = std::move(launched_.front());
    launched_.erase(launched_.begin());
    return tokens;
  }
  // Forgets the launched steps (after an error), once the device is done with them.
  virtual void discard() { launched_.clear(); }

 private:
  std::vector<std::vector<SampledToken>> launched_;
};

}  // namespace kestrel
