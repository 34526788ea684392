// Test doubles for the engine: a fake model that keeps a simulated paged KV cache, and a
// reference generator that knows nothing of blocks or scheduling.
//
// The fake model's "K/V" at position p is kv(p) = mix(kv(p - 1), token p): like real K/V
// it depends on every token before it. The executor computes it from the value it reads
// back from the cache at position p - 1 (through the block table), and samples from the
// cached value of the last position. So a wrong prefix hit, a block written while shared
// or a block table that misses a position changes the sampled tokens, and is also caught
// directly: every sampled sequence's cached chain is checked against its tokens.
#pragma once

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/llm_engine.h"
#include "engine/model_executor.h"

namespace kestrel::testing {

constexpr uint64_t kKvRoot = 0x243f6a8885a308d3ull;

inline uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t z = a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline uint64_t kv_value(uint64_t prev, int token) { return mix(prev, uint64_t(token) + 1); }

// The token the fake model emits after a sequence whose last K/V value is `last_kv`.
inline int next_token(uint64_t seed, uint64_t last_kv, int vocab_size) {
  return static_cast<int>(mix(seed, last_kv) % uint64_t(vocab_size));
}

// The fake model's prompt logprob of `token` at a position whose K/V value is `kv`: like
// the sampled token, a function of every token up to that position.
inline TokenLogprobs fake_prompt_logprob(uint64_t kv, int token) {
  return TokenLogprobs{token, -static_cast<float>(kv % 1000) / 100.0f, 1 + static_cast<int>(kv % 7), {}};
}

// Independent of the engine: XXH3 of the sample index under the request seed, as the
// engine documents it.
inline uint64_t expected_sample_seed(uint64_t request_seed, int index) {
  const uint64_t i = uint64_t(index);
  return XXH3_64bits_withSeed(&i, 8, request_seed);
}

struct StepEntry {
  int64_t seq_id = 0;
  std::string request_id;
  int sample_index = 0;
  int computed_before = 0;
  int num_new = 0;
  bool sample = false;
  int num_preemptions = 0;
  int num_tokens = 0;
  int num_cached = 0;
  // Its input ends in a token the step before is still sampling (the engine's overlap).
  bool pending_input = false;
  // Admitted in this step: only then is num_computed_tokens still the prefix-cache hit
  // count (a running sequence has computed at least one token beyond it).
  bool admitted() const { return computed_before == num_cached; }
};
struct StepRecord {
  std::vector<StepEntry> entries;
  int num_tokens = 0;
};

class PagedFakeExecutor : public ModelExecutor {
 public:
  PagedFakeExecutor(int num_blocks, int block_size, int vocab_size)
      : block_size_(block_size),
        vocab_size_(vocab_size),
        cache_(size_t(num_blocks) * block_size, 0) {}

  std::vector<SampledToken> execute(const ScheduledBatch& batch) override {
    StepRecord record;
    std::set<size_t> written;
    std::vector<SampledToken> out;
    int total = 0;
    for (const ScheduledSeq& s : batch.seqs) {
      const Sequence& seq = *s.seq;
      const int begin = seq.num_computed_tokens;
      const int end = begin + s.num_new_tokens;
      total += s.num_new_tokens;
      record.entries.push_back(StepEntry{seq.seq_id, seq.request_id, seq.sample_index, begin,
                                         s.num_new_tokens, s.sample, seq.num_preemptions,
                                         seq.num_tokens(), seq.num_cached_tokens,
                                         is_pending_token(seq.token_ids.back())});
      if (s.num_new_tokens < 1 || end > seq.num_tokens()) error("bad token range", seq);
      if (int64_t(seq.block_table.size()) * block_size_ < end) {
        error("block table does not cover the step", seq);
        continue;
      }
      if (s.sample != (end == seq.num_tokens())) error("wrong sample flag", seq);
      for (int p = begin; p < end; ++p) {
        const uint64_t prev = p == 0 ? kKvRoot : cache_[slot(seq, p - 1)];
        const size_t sl = slot(seq, p);
        if (!written.insert(sl).second) error("two writes to one slot in a step", seq);
        cache_[sl] = kv_value(prev, token_at(seq, p));
      }
      if (seq.computes_prompt_logprobs()) {
        // As the model runner: the entries past those the sequence holds, in order, so a
        // prompt position served from the prefix cache leaves a gap.
        Sequence& filled = *s.seq;
        const int to = std::min(end, seq.num_prompt_tokens - 1);
        for (int p = std::max(begin, int(filled.prompt_logprobs.size())); p < to; ++p) {
          if (p != int(filled.prompt_logprobs.size())) {
            error("a prompt position without logits (a prefix-cache hit?)", seq);
            break;
          }
          filled.prompt_logprobs.push_back(fake_prompt_logprob(cache_[slot(seq, p)], seq.token_ids[p + 1]));
        }
      }
      if (!s.sample) continue;
      uint64_t expected = kKvRoot;
      for (int p = 0; p < end; ++p) {
        expected = kv_value(expected, token_at(seq, p));
        if (cache_[slot(seq, p)] != expected) {
          error("cached K/V does not match the tokens", seq);
          break;
        }
      }
      if (pending_samples && seq.params->has_penalties()) {
        // As a sampler counting the output ids would: each one, the pending one fed.
        for (int p = seq.num_prompt_tokens; p < seq.num_tokens(); ++p) token_at(seq, p);
      }
      SampledToken t;
      t.token_id = next_token(seq.seed, cache_[slot(seq, end - 1)], vocab_size_);
      if (seq.params->logprobs) {
        t.logprobs = TokenLogprobs{t.token_id, -0.25f * float(t.token_id % 5), 1, {}};
      }
      out.push_back(t);
    }
    record.num_tokens = total;
    if (total != batch.num_tokens) ADD_FAILURE() << "batch.num_tokens is wrong";
    steps.push_back(std::move(record));
    last_sampled_.clear();
    for (const SampledToken& t : out) last_sampled_.push_back(t.token_id);
    return out;
  }

  // Runs each step at launch; pending tokens are fed from the previous step's samples, as a
  // device executor does.
  bool supports_overlap() const override { return true; }
  void launch(const ScheduledBatch& batch) override { queue_.push_back(execute(batch)); }
  std::vector<SampledToken> collect() override {
    if (queue_.empty()) {
      ADD_FAILURE() << "collect() with nothing launched";
      return {};
    }
    std::vector<SampledToken> tokens = std::move(queue_.front());
    queue_.erase(queue_.begin());
    return tokens;
  }
  void discard() override {
    queue_.clear();
    held_.reset();
  }
  // Deferred sampling (when deferred_sampling): the step runs at launch_forward(), as at
  // launch(); launch_sampling() checks that every running row it samples has no pending
  // token but its own (the step before settled: its constraint was told its token), then
  // releases the step's tokens.
  bool supports_deferred_sampling() const override { return deferred_sampling; }
  void launch_forward(const ScheduledBatch& batch) override {
    if (held_) error_at_step("a second launch_forward() before launch_sampling()");
    held_ = execute(batch);
  }
  void launch_sampling(const ScheduledBatch& batch) override {
    if (!held_) {
      error_at_step("launch_sampling() without launch_forward()");
      return;
    }
    for (const ScheduledSeq& s : batch.seqs) {
      if (s.sample && s.seq->status == SequenceStatus::kRunning && s.seq->num_pending_tokens != 1) {
        error("sampled with a pending token of the step before", *s.seq);
      }
    }
    ++deferred_samplings;
    queue_.push_back(std::move(*held_));
    held_.reset();
  }
  bool deferred_sampling = false;
  int deferred_samplings = 0;
  // Whether it claims to feed pending tokens to its sampler's output ids (the engine then
  // overlaps steps of sequences with penalties).
  bool samples_pending_tokens() const override { return pending_samples; }
  bool pending_samples = false;

  std::vector<StepRecord> steps;
  std::vector<std::string> errors;

 private:
  int token_at(const Sequence& seq, int pos) {
    const int id = seq.token_ids[pos];
    if (!is_pending_token(id)) return id;
    if (pending_row(id) >= int(last_sampled_.size())) {
      error("a pending token of no sampled row", seq);
      return 0;
    }
    return last_sampled_[pending_row(id)];
  }
  size_t slot(const Sequence& seq, int pos) const {
    return size_t(seq.block_table[pos / block_size_]) * block_size_ + pos % block_size_;
  }
  void error(const std::string& what, const Sequence& seq) {
    errors.push_back(what + " (seq " + std::to_string(seq.seq_id) + ")");
  }
  void error_at_step(const std::string& what) {
    errors.push_back(what + " (step " + std::to_string(steps.size()) + ")");
  }

  std::vector<std::vector<SampledToken>> queue_;  // launched, not collected
  std::optional<std::vector<SampledToken>> held_;  // launch_forward()'s, until launch_sampling()

  const int block_size_;
  const int vocab_size_;
  std::vector<uint64_t> cache_;
  std::vector<int> last_sampled_;  // the previous step's tokens, by sampled row
};

// What one sample should produce, computed straight from the token chain.
struct Expected {
  std::vector<int> tokens;
  std::string finish_reason;
};

inline Expected reference_generate(const std::vector<int>& prompt, uint64_t seed,
                                   const SamplingParams& params, int vocab_size,
                                   const std::vector<int>& eos_ids, int max_model_len) {
  Expected e;
  uint64_t kv = kKvRoot;
  for (int t : prompt) kv = kv_value(kv, t);
  int num_tokens = static_cast<int>(prompt.size());
  while (true) {
    const int t = next_token(seed, kv, vocab_size);
    e.tokens.push_back(t);
    ++num_tokens;
    kv = kv_value(kv, t);
    const int n = static_cast<int>(e.tokens.size());
    const bool is_eos = std::find(eos_ids.begin(), eos_ids.end(), t) != eos_ids.end();
    const bool is_stop = std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), t) !=
                         params.stop_token_ids.end();
    if (n > params.min_tokens && ((is_eos && !params.ignore_eos) || is_stop)) {
      e.finish_reason = "stop";
      return e;
    }
    if ((params.max_tokens && n >= *params.max_tokens) || num_tokens >= max_model_len) {
      e.finish_reason = "length";
      return e;
    }
  }
}

// Steps the engine until it is idle; returns each request's final output.
inline std::map<std::string, RequestOutput> run_to_completion(LLMEngine& engine,
                                                              int max_steps = 100000) {
  std::map<std::string, RequestOutput> done;
  for (int i = 0; i < max_steps && engine.has_unfinished(); ++i) {
    for (RequestOutput& out : engine.step()) {
      if (out.finished) done[out.request_id] = std::move(out);
    }
  }
  EXPECT_FALSE(engine.has_unfinished()) << "engine did not finish in " << max_steps << " steps";
  return done;
}

// Deterministic, non-zero prompt tokens.
inline std::vector<int> make_prompt(int length, uint64_t salt, int vocab_size) {
  std::vector<int> p(length);
  for (int i = 0; i < length; ++i)
    p[i] = 1 + int(mix(salt, uint64_t(i)) % uint64_t(vocab_size - 1));
  return p;
}

}  // namespace kestrel::testing
