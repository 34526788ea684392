// Scheduler: decides, every step, which tokens of which sequences are computed.
//
// Policy (vLLM v1 style, one token budget per step, no prefill/decode phases):
//   1. running sequences with one token left to compute (decodes), oldest first;
//   2. running sequences still in their prompt (partial prefills), oldest first, each
//      getting min(remaining tokens, remaining budget);
//   3. waiting sequences in arrival order (FCFS, no skipping) while budget and the
//      max_num_seqs cap allow: prefix-cache hits are taken at admission, then the rest is
//      chunked to the remaining budget. Without chunked prefill a prompt that does not fit
//      the remaining budget waits for a later step (and so does everything behind it).
// When a running sequence needs a block and none is free, the newest running sequence is
// preempted by recompute (blocks freed, num_computed_tokens = 0, back to WAITING, where
// arrival order puts it ahead of requests never admitted); if the newest is the sequence
// itself, it is the one preempted. No request is admitted in a step that preempted.
// "Age" is seq_id (arrival order), also for sequences that were preempted and came back,
// so the oldest running sequence always makes progress and nothing hangs.
//
// Samples of one request (n > 1): sample 0 is queued first; the others join WAITING when
// sample 0's prompt has been computed, and take its full prompt blocks on admission (a
// prefix-cache hit, or a direct share of sample 0's blocks when caching is off).
//
// Not thread-safe. The scheduler does not own sequences: they must outlive their time in it.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/block_manager.h"
#include "engine/model_executor.h"
#include "engine/sequence.h"

namespace kestrel {

struct SchedulerConfig {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 8192;
  // Longest sequence (prompt + output) the model accepts.
  int max_model_len = 4096;
  bool enable_chunked_prefill = true;
  // Token ids that end a sequence unless its params say ignore_eos.
  std::vector<int> eos_token_ids;
};

class Scheduler {
 public:
  // Throws Error when a limit is < 1.
  Scheduler(SchedulerConfig config, BlockManager& block_manager);

  // The max_model_len in effect, the longest sequence that can run: min(config's
  // max_model_len, KV cache tokens, and without chunked prefill max_num_batched_tokens + 1,
  // since a preempted sequence re-prefills all its tokens in one step). A sequence reaching
  // it finishes with "length".
  int max_model_len() const { return max_model_len_; }
  // Throws Error (naming the limit) unless 1 <= prompt_len < max_model_len().
  void check_prompt_len(int prompt_len) const;

  // Queues one request's samples (samples[i]->sample_index == i, all WAITING, same
  // prompt). REQUIRES: check_prompt_len passed; seq_ids larger than any added before.
  void add(std::span<Sequence* const> samples);

  // Plans the next step and allocates its blocks. Empty when nothing can run.
  ScheduledBatch schedule();

  // Applies a step's results: advances num_computed_tokens, publishes full blocks,
  // appends the sampled tokens (one per ScheduledSeq with sample == true, in batch order)
  // and their logprobs, runs the stop checks and frees finished sequences' blocks.
  // Returns the sequences that got a token (finished or not), in batch order.
  std::vector<Sequence*> postprocess(const ScheduledBatch& batch,
                                     std::span<const SampledToken> sampled);

  // postprocess() in two halves, for the engine's overlap (llm_engine.h). on_launched(),
  // right after the step is launched: advances num_computed_tokens and appends one
  // pending_token(r) placeholder per sampled sequence (r: its sampled row). settle(), once
  // the tokens are back: each replaces its sequence's oldest placeholder; then the rest of
  // postprocess(). A sequence a step ends keeps no placeholder of a later step.
  void on_launched(const ScheduledBatch& batch);
  std::vector<Sequence*> settle(const ScheduledBatch& batch, std::span<const SampledToken> sampled);
  // Takes back on_launched() of a step that will not be settled (the executor failed).
  // Steps in flight are undone newest first: each pops its own placeholder.
  void undo_launched(const ScheduledBatch& batch);

  // Whether schedule() can run without preempting (what it must not do while a sequence's
  // token is pending): the free blocks cover every running sequence's remaining tokens.
  bool can_schedule_ahead() const;

  // Finishes `seq` with finish_reason "abort" wherever it is and frees its blocks.
  // No-op for a finished sequence.
  void abort(Sequence* seq);

  int num_running() const { return static_cast<int>(running_.size()); }
  // Queued sequences, samples not yet released included.
  int num_waiting() const { return static_cast<int>(waiting_.size()) + num_pending_; }
  bool has_unfinished() const { return !running_.empty() || num_waiting() > 0; }
  int64_t num_preemptions() const { return num_preemptions_; }
  const BlockManager& block_manager() const { return block_manager_; }

 private:
  void schedule_running(ScheduledBatch& batch, int& budget);
  void admit_waiting(ScheduledBatch& batch, int& budget);
  // Preempts newest running sequences until `seq` can get blocks for num_new tokens.
  // Returns false when `seq` itself had to be preempted.
  bool make_room(Sequence* seq, int num_new, ScheduledBatch& batch, int& budget);
  void preempt(Sequence* seq, ScheduledBatch& batch, int& budget);
  PrefixMatch match_prefix(const Sequence& seq) const;
  void release_samples(Sequence* first);
  // Why `seq` ends with its settled tokens ("" when it goes on).
  std::string stop_reason(const Sequence& seq) const;
  // Whether `seq` ends by length (max_tokens, max_model_len()) at `num_tokens` tokens.
  bool ends_by_length(const Sequence& seq, int num_tokens) const;
  // Whether its pending token (known to come) ends `seq` by length: nothing to schedule.
  bool pending_ends_by_length(const Sequence& seq) const;
  void finish(Sequence* seq, std::string reason);
  void insert_waiting(Sequence* seq);
  void insert_running(Sequence* seq);

  const SchedulerConfig config_;
  BlockManager& block_manager_;
  int max_model_len_ = 0;           // in effect (max_model_len())
  std::deque<Sequence*> waiting_;   // sorted by seq_id
  std::vector<Sequence*> running_;  // sorted by seq_id
  // seq_id of a request's sample 0 -> its other samples, until sample 0's prompt is done.
  std::unordered_map<int64_t, std::vector<Sequence*>> pending_samples_;
  int num_pending_ = 0;
  // seq_id of a released sample -> the sample 0 whose blocks it may share.
  std::unordered_map<int64_t, Sequence*> share_source_;
  int64_t num_preemptions_ = 0;
};

}  // namespace kestrel
