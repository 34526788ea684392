// An LLMEngine over the PagedFakeExecutor, plus the checks most engine tests share.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <map>
#include <string>
#include <vector>

#include "fake_model.h"

namespace kestrel::testing {

inline EngineLimits small_limits() {
  EngineLimits l;
  l.max_num_seqs = 8;
  l.max_num_batched_tokens = 64;
  l.max_model_len = 256;
  l.block_size = 4;
  l.num_kv_blocks = 256;
  l.vocab_size = 1000;
  l.eos_token_ids = {0};
  l.seed = 1;
  return l;
}

// The max_model_len in effect, derived from the limits as docs/engine.md states it.
inline int expected_max_model_len(const EngineLimits& l) {
  int64_t limit = std::min<int64_t>(l.max_model_len, int64_t{l.num_kv_blocks} * l.block_size);
  if (!l.enable_chunked_prefill) limit = std::min<int64_t>(limit, l.max_num_batched_tokens + 1);
  return static_cast<int>(limit);
}

struct Harness {
  explicit Harness(const EngineLimits& l)
      : limits(l), executor(l.num_kv_blocks, l.block_size, l.vocab_size), engine(l, executor) {}

  struct Added {
    std::vector<int> prompt;
    SamplingParams params;
  };

  void add(const std::string& id, std::vector<int> prompt, SamplingParams params) {
    added[id] = Added{prompt, params};
    engine.add_request(id, std::move(prompt), params);
  }

  // The reference output of sample `index` of request `id` (params must carry a seed).
  Expected expected(const std::string& id, int index) const {
    const Added& a = added.at(id);
    return reference_generate(a.prompt, expected_sample_seed(*a.params.seed, index), a.params,
                              limits.vocab_size, limits.eos_token_ids,
                              expected_max_model_len(limits));
  }

  // Runs to the end and checks every request finished so far against the reference.
  std::map<std::string, RequestOutput> run_and_check() {
    for (auto& [id, out] : run_to_completion(engine)) finished[id] = std::move(out);
    EXPECT_EQ(finished.size(), added.size());
    for (const auto& [id, out] : finished) {
      const Added& a = added.at(id);
      EXPECT_EQ(out.prompt_token_ids, a.prompt) << id;
      EXPECT_EQ(out.outputs.size(), size_t(a.params.n)) << id;
      for (const CompletionOutput& c : out.outputs) {
        const Expected e = expected(id, c.index);
        EXPECT_EQ(c.token_ids, e.tokens) << id << " sample " << c.index;
        EXPECT_EQ(c.finish_reason, e.finish_reason) << id << " sample " << c.index;
      }
    }
    EXPECT_TRUE(executor.errors.empty()) << executor.errors.front();
    EXPECT_EQ(engine.block_manager().num_free_blocks(), limits.num_kv_blocks);
    return finished;
  }

  // Entries of request `id` (sample `index`) over all steps, with their step numbers.
  std::vector<std::pair<int, StepEntry>> entries_of(const std::string& id, int index = 0) const {
    std::vector<std::pair<int, StepEntry>> out;
    for (size_t s = 0; s < executor.steps.size(); ++s) {
      for (const StepEntry& e : executor.steps[s].entries) {
        if (e.request_id == id && e.sample_index == index) out.emplace_back(int(s), e);
      }
    }
    return out;
  }

  EngineLimits limits;
  PagedFakeExecutor executor;
  LLMEngine engine;
  std::map<std::string, Added> added;
  std::map<std::string, RequestOutput> finished;  // by run_and_check
};

inline SamplingParams seeded(uint64_t seed, int max_tokens, bool ignore_eos = true) {
  SamplingParams p;
  p.seed = seed;
  p.max_tokens = max_tokens;
  p.ignore_eos = ignore_eos;
  return p;
}

}  // namespace kestrel::testing
