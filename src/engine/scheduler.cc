#include "engine/scheduler.h"

#include <algorithm>
#include <climits>

#include "core/error.h"

namespace kestrel {
namespace {

bool older(const Sequence* a, const Sequence* b) { return a->seq_id < b->seq_id; }

bool contains(const std::vector<int>& ids, int id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

Scheduler::Scheduler(SchedulerConfig config, BlockManager& block_manager)
    : config_(std::move(config)), block_manager_(block_manager) {
  KS_CHECK(config_.max_num_seqs >= 1, "max_num_seqs must be >= 1, got {}", config_.max_num_seqs);
  KS_CHECK(config_.max_num_batched_tokens >= 1, "max_num_batched_tokens must be >= 1, got {}",
           config_.max_num_batched_tokens);
  KS_CHECK(config_.max_model_len >= 1, "max_model_len must be >= 1, got {}", config_.max_model_len);
  const int64_t cache_tokens = int64_t{block_manager_.num_blocks()} * block_manager_.block_size();
  int64_t limit = std::min<int64_t>(config_.max_model_len, cache_tokens);
  if (!config_.enable_chunked_prefill) {
    limit = std::min<int64_t>(limit, int64_t{config_.max_num_batched_tokens} + 1);
  }
  max_model_len_ = static_cast<int>(std::min<int64_t>(limit, INT_MAX));
}

void Scheduler::check_prompt_len(int prompt_len) const {
  KS_CHECK(prompt_len >= 1, "the prompt is empty");
  if (prompt_len < max_model_len_) return;
  const int64_t cache_tokens = int64_t{block_manager_.num_blocks()} * block_manager_.block_size();
  throw_error(
      "the prompt has {} tokens but at most {} fit (one less than the longest sequence: "
      "max_model_len {}, KV cache {} tokens{})",
      prompt_len, max_model_len_ - 1, config_.max_model_len, cache_tokens,
      config_.enable_chunked_prefill
          ? std::string()
          : fmt::format(", max_num_batched_tokens {} without chunked prefill",
                        config_.max_num_batched_tokens));
}

void Scheduler::insert_waiting(Sequence* seq) {
  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), seq, older), seq);
}

void Scheduler::insert_running(Sequence* seq) {
  running_.insert(std::upper_bound(running_.begin(), running_.end(), seq, older), seq);
}

void Scheduler::add(std::span<Sequence* const> samples) {
  KS_ASSERT(!samples.empty());
  for (Sequence* seq : samples) KS_ASSERT(seq->status == SequenceStatus::kWaiting);
  insert_waiting(samples[0]);
  if (samples.size() > 1) {
    pending_samples_[samples[0]->seq_id].assign(samples.begin() + 1, samples.end());
    num_pending_ += static_cast<int>(samples.size()) - 1;
  }
}

ScheduledBatch Scheduler::schedule() {
  ScheduledBatch batch;
  int budget = config_.max_num_batched_tokens;
  const int64_t preemptions_before = num_preemptions_;
  schedule_running(batch, budget);
  // Admitting now would take blocks the preempted sequences are about to ask back for.
  if (num_preemptions_ == preemptions_before) admit_waiting(batch, budget);
  for (const ScheduledSeq& s : batch.seqs) batch.num_tokens += s.num_new_tokens;
  return batch;
}

void Scheduler::schedule_running(ScheduledBatch& batch, int& budget) {
  const std::vector<Sequence*> snapshot = running_;
  // Pass 0: decodes; pass 1: partial prefills.
  for (int pass = 0; pass < 2; ++pass) {
    for (Sequence* seq : snapshot) {
      if (budget == 0) return;
      if (seq->status != SequenceStatus::kRunning) continue;  // preempted in this step
      if (pending_ends_by_length(*seq)) continue;
      const int remaining = seq->num_uncomputed_tokens();
      KS_ASSERT(remaining >= 1, "running sequence {} has nothing to compute", seq->seq_id);
      if ((remaining == 1) != (pass == 0)) continue;
      const int num_new = std::min(remaining, budget);
      if (!config_.enable_chunked_prefill && num_new < remaining) continue;
      if (!make_room(seq, num_new, batch, budget)) continue;
      block_manager_.allocate_for(*seq, num_new);
      const bool sample = seq->num_computed_tokens + num_new == seq->num_tokens();
      batch.seqs.push_back(ScheduledSeq{seq, num_new, sample});
      budget -= num_new;
    }
  }
}

bool Scheduler::make_room(Sequence* seq, int num_new, ScheduledBatch& batch, int& budget) {
  while (!block_manager_.can_allocate(*seq, num_new)) {
    Sequence* victim = running_.back();
    preempt(victim, batch, budget);
    if (victim == seq) return false;
  }
  return true;
}

void Scheduler::preempt(Sequence* seq, ScheduledBatch& batch, int& budget) {
  // If the victim is already in this step's batch (it would be a newer decode scheduled
  // before an older partial prefill; the admission order makes that rare), take it out
  // and give its tokens back so the batch never names a sequence without blocks.
  auto in_batch = std::find_if(batch.seqs.begin(), batch.seqs.end(),
                               [&](const ScheduledSeq& s) { return s.seq == seq; });
  if (in_batch != batch.seqs.end()) {
    budget += in_batch->num_new_tokens;
    batch.seqs.erase(in_batch);
  }
  std::erase(running_, seq);
  block_manager_.free(*seq);
  seq->status = SequenceStatus::kWaiting;
  ++seq->num_preemptions;
  ++num_preemptions_;
  insert_waiting(seq);
}

PrefixMatch Scheduler::match_prefix(const Sequence& seq) const {
  if (seq.computes_prompt_logprobs()) return {};
  if (block_manager_.prefix_caching_enabled()) return block_manager_.find_cached_prefix(seq);
  auto it = share_source_.find(seq.seq_id);
  if (it == share_source_.end()) return {};
  const Sequence* source = it->second;
  if (source->status != SequenceStatus::kRunning) return {};
  return block_manager_.share_prefix(*source, seq);
}

void Scheduler::admit_waiting(ScheduledBatch& batch, int& budget) {
  while (!waiting_.empty() && budget > 0 &&
         static_cast<int>(running_.size()) < config_.max_num_seqs) {
    Sequence* seq = waiting_.front();
    const PrefixMatch match = match_prefix(*seq);
    const int num_matched_tokens =
        static_cast<int>(match.blocks.size()) * block_manager_.block_size();
    const int remaining = seq->num_tokens() - num_matched_tokens;
    // FCFS: when the oldest waiting sequence cannot start, nothing behind it does.
    if (!config_.enable_chunked_prefill && remaining > budget) break;
    const int num_new = std::min(remaining, budget);
    if (!block_manager_.can_allocate(*seq, match, num_new)) break;
    waiting_.pop_front();
    share_source_.erase(seq->seq_id);
    block_manager_.allocate_prefix(*seq, match);
    block_manager_.allocate_for(*seq, num_new);
    seq->status = SequenceStatus::kRunning;
    insert_running(seq);
    const bool sample = seq->num_computed_tokens + num_new == seq->num_tokens();
    batch.seqs.push_back(ScheduledSeq{seq, num_new, sample});
    budget -= num_new;
  }
}

void Scheduler::release_samples(Sequence* first) {
  auto it = pending_samples_.find(first->seq_id);
  if (it == pending_samples_.end()) return;
  for (Sequence* seq : it->second) {
    share_source_[seq->seq_id] = first;
    insert_waiting(seq);
  }
  num_pending_ -= static_cast<int>(it->second.size());
  pending_samples_.erase(it);
}

bool Scheduler::can_schedule_ahead() const {
  int64_t needed = 0;
  for (const Sequence* seq : running_) {
    if (pending_ends_by_length(*seq)) continue;
    needed += block_manager_.num_blocks_needed(*seq, seq->num_uncomputed_tokens());
  }
  return needed <= block_manager_.num_free_blocks();
}

bool Scheduler::ends_by_length(const Sequence& seq, int num_tokens) const {
  const std::optional<int>& max_tokens = seq.params->max_tokens;
  return (max_tokens && num_tokens - seq.num_prompt_tokens >= *max_tokens) ||
         num_tokens >= max_model_len_;
}

bool Scheduler::pending_ends_by_length(const Sequence& seq) const {
  return seq.num_pending_tokens > 0 && ends_by_length(seq, seq.num_tokens());
}

std::string Scheduler::stop_reason(const Sequence& seq) const {
  const SamplingParams& params = *seq.params;
  const int num_tokens = seq.num_settled_tokens();
  const int last = seq.token_ids[num_tokens - 1];
  const int num_output = num_tokens - seq.num_prompt_tokens;
  // The first min_tokens generated tokens cannot stop the sequence (the sampler masks
  // them; this check must agree even if it did not).
  if (num_output > params.min_tokens) {
    if (!params.ignore_eos && contains(config_.eos_token_ids, last)) return "stop";
    if (contains(params.stop_token_ids, last)) return "stop";
  }
  if (ends_by_length(seq, num_tokens)) return "length";
  return {};
}

void Scheduler::finish(Sequence* seq, std::string reason) {
  if (seq->status == SequenceStatus::kRunning) {
    std::erase(running_, seq);
  } else {
    std::erase(waiting_, seq);
  }
  block_manager_.free(*seq);
  share_source_.erase(seq->seq_id);
  seq->token_ids.resize(seq->num_settled_tokens());
  seq->num_pending_tokens = 0;
  seq->status = SequenceStatus::kFinished;
  seq->finish_reason = std::move(reason);
}

std::vector<Sequence*> Scheduler::postprocess(const ScheduledBatch& batch,
                                              std::span<const SampledToken> sampled) {
  on_launched(batch);
  return settle(batch, sampled);
}

void Scheduler::undo_launched(const ScheduledBatch& batch) {
  for (const ScheduledSeq& s : batch.seqs) {
    Sequence* seq = s.seq;
    if (seq->status != SequenceStatus::kRunning) continue;  // ended: nothing of it is left
    seq->num_computed_tokens -= s.num_new_tokens;
    if (!s.sample) continue;
    seq->token_ids.pop_back();
    --seq->num_pending_tokens;
  }
}

void Scheduler::on_launched(const ScheduledBatch& batch) {
  int row = 0;
  for (const ScheduledSeq& s : batch.seqs) {
    Sequence* seq = s.seq;
    const int r = s.sample ? row++ : -1;
    if (seq->status != SequenceStatus::kRunning) continue;  // aborted since schedule()
    seq->num_computed_tokens += s.num_new_tokens;
    KS_ASSERT(seq->num_computed_tokens <= seq->num_tokens());
    if (r < 0) continue;
    seq->token_ids.push_back(pending_token(r));
    ++seq->num_pending_tokens;
  }
}

std::vector<Sequence*> Scheduler::settle(const ScheduledBatch& batch,
                                         std::span<const SampledToken> sampled) {
  std::vector<Sequence*> changed;
  size_t next = 0;
  for (const ScheduledSeq& s : batch.seqs) {
    Sequence* seq = s.seq;
    KS_ASSERT(!s.sample || next < sampled.size(), "fewer sampled tokens than sampled sequences");
    const SampledToken* token = s.sample ? &sampled[next++] : nullptr;
    // Aborted, or ended by the step before (its placeholder for this one is gone).
    if (seq->status != SequenceStatus::kRunning) continue;
    if (token != nullptr) {  // first: a block the placeholder was in is hashed below
      KS_ASSERT(seq->num_pending_tokens > 0, "seq {}: a token for no placeholder", seq->seq_id);
      seq->token_ids[seq->num_settled_tokens()] = token->token_id;
      --seq->num_pending_tokens;
      if (seq->constraint) seq->constraint->accept(token->token_id);
    }
    block_manager_.register_full_blocks(*seq);
    if (token == nullptr) continue;
    if (token->logprobs) seq->logprobs.push_back(*token->logprobs);
    changed.push_back(seq);
    release_samples(seq);
    std::string reason = stop_reason(*seq);
    if (!reason.empty()) finish(seq, std::move(reason));
  }
  KS_ASSERT(next == sampled.size(), "{} sampled tokens for {} sampled sequences", sampled.size(),
            next);
  return changed;
}

void Scheduler::abort(Sequence* seq) {
  if (seq->is_finished()) return;
  auto pending = pending_samples_.find(seq->seq_id);
  if (pending != pending_samples_.end()) {
    // The other samples no longer wait for this one's prompt.
    for (Sequence* other : pending->second) insert_waiting(other);
    num_pending_ -= static_cast<int>(pending->second.size());
    pending_samples_.erase(pending);
  }
  for (auto& [first_id, others] : pending_samples_) {
    if (std::erase(others, seq) > 0) {
      --num_pending_;
      seq->status = SequenceStatus::kFinished;
      seq->finish_reason = "abort";
      return;
    }
  }
  finish(seq, "abort");
}

}  // namespace kestrel
