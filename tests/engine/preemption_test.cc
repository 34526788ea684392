// Preemption by recompute: outputs must not depend on it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "engine_harness.h"

namespace kestrel::testing {
namespace {

// Six requests, some sharing a 12-token prefix, 8..20 prompt tokens, 12..22 output tokens.
void add_workload(Harness& h) {
  const int vocab = h.limits.vocab_size;
  const std::vector<int> shared = make_prompt(12, 77, vocab);
  for (int i = 0; i < 6; ++i) {
    std::vector<int> prompt = i % 2 == 0 ? shared : make_prompt(8, 200 + i, vocab);
    const std::vector<int> tail = make_prompt(i + 1, 300 + i, vocab);
    prompt.insert(prompt.end(), tail.begin(), tail.end());
    h.add(fmt::format("r{}", i), prompt, seeded(1000 + i, 12 + 2 * i));
  }
}

TEST(Preemption, TinyCacheGivesTheSameTokensAsARoomyOne) {
  for (bool caching : {false, true}) {
    EngineLimits roomy = small_limits();
    roomy.enable_prefix_caching = caching;
    Harness a(roomy);
    add_workload(a);
    const auto expected = a.run_and_check();
    EXPECT_EQ(a.engine.stats().num_preemptions, 0);

    EngineLimits tiny = roomy;
    tiny.num_kv_blocks = 14;  // 56 slots; one request needs up to 11 blocks
    Harness b(tiny);
    add_workload(b);
    const auto got = b.run_and_check();  // also checks against the reference
    EXPECT_GT(b.engine.stats().num_preemptions, 3) << "caching " << caching;
    for (const auto& [id, out] : expected) {
      EXPECT_EQ(got.at(id).outputs[0].token_ids, out.outputs[0].token_ids) << id;
    }
  }
}

TEST(Preemption, ResumedSequenceRecomputesOrHitsThenDecodesOn) {
  for (bool caching : {false, true}) {
    EngineLimits l = small_limits();
    l.enable_prefix_caching = caching;
    l.num_kv_blocks = 14;
    Harness h(l);
    add_workload(h);
    h.run_and_check();
    int resumed = 0, resumed_with_hits = 0;
    for (const auto& [id, added] : h.added) {
      const auto entries = h.entries_of(id);
      for (size_t i = 1; i < entries.size(); ++i) {
        const StepEntry& prev = entries[i - 1].second;
        const StepEntry& e = entries[i].second;
        if (e.num_preemptions == prev.num_preemptions) continue;
        ++resumed;
        // Resumes with prompt + the tokens generated before the preemption.
        EXPECT_GT(e.num_tokens, int(added.prompt.size()));
        if (caching) {
          EXPECT_EQ(e.computed_before % l.block_size, 0);
          resumed_with_hits += e.computed_before > 0;
        } else {
          EXPECT_EQ(e.computed_before, 0);
        }
        // Once its tokens are recomputed it decodes one token a step.
        size_t j = i;
        while (j < entries.size() && !entries[j].second.sample) ++j;
        for (size_t k = j + 1; k < entries.size(); ++k) {
          if (entries[k].second.num_preemptions != e.num_preemptions) break;
          EXPECT_EQ(entries[k].second.num_new, 1);
        }
      }
    }
    EXPECT_GT(resumed, 0);
    if (caching) {
      EXPECT_GT(resumed_with_hits, 0);
    }
  }
}

}  // namespace
}  // namespace kestrel::testing
