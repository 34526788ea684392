// The model against Hugging Face transformers: for every folder of tests/data/hf (tiny
// random models saved by tools/make_hf_fixture.py with HF's fp32 logits and greedy
// continuations), load it on the CPU backend and check
//   - one-shot prefill logits at every position,
//   - the same prompt prefilled in chunks of 5 through the paged cache,
//   - 20 greedy tokens (prefill, then one token per step), per prompt and batched,
//   - the RoPE frequencies against HF's inv_freq and attention scaling.
// Logit rows must agree to 1e-4: ||a - b|| / ||b|| and max |a - b| / max |b|.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "io/model_config.h"
#include "hf_fixtures.h"
#include "model/causal_lm.h"
#include "model/rope.h"
#include "paged_runner.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

constexpr double kTolerance = 1e-4;

using test::fixture_models;
using test::fixture_root;

void expect_logits_match(const std::vector<float>& got, const nlohmann::json& want,
                         const std::string& where) {
  ASSERT_EQ(got.size(), want.size()) << where;
  double diff2 = 0, ref2 = 0, max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double w = want[i].get<double>();
    const double d = std::abs(got[i] - w);
    diff2 += d * d;
    ref2 += w * w;
    max_diff = std::max(max_diff, std::isnan(d) ? INFINITY : d);
    max_ref = std::max(max_ref, std::abs(w));
  }
  EXPECT_LE(std::sqrt(diff2 / ref2), kTolerance) << where << ": relative L2 error";
  EXPECT_LE(max_diff / max_ref, kTolerance)
      << where << ": max abs diff " << max_diff << " vs row max " << max_ref;
}

class HfFixture : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = (fixture_root() / GetParam()).string();
    expected_ = read_json_file(dir_ + "/expected.json");
    model_ = CausalLM::load(dir_, backend_);
    for (const auto& p : expected_["prompts"]) prompts_.push_back(p.get<std::vector<int>>());
  }

  std::vector<int> greedy(int p) const { return expected_["greedy"][p].get<std::vector<int>>(); }

  // One thread: the ops of these tiny models are too small to parallelise, and idle OpenMP
  // workers spinning between ops slow a loaded CI machine down. BatchedGreedy uses two.
  CpuBackend backend_{1};
  std::string dir_;
  nlohmann::json expected_;
  std::unique_ptr<CausalLM> model_;
  std::vector<std::vector<int>> prompts_;
};

TEST_P(HfFixture, RopeMatchesTransformers) {
  const RopeFrequencies f = rope_frequencies(model_->config());
  const auto want = expected_["rope_inv_freq"].get<std::vector<double>>();
  ASSERT_EQ(f.inv_freq.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(f.inv_freq[i], want[i], 2e-6 * want[i]) << "inv_freq[" << i << "]";
  }
  EXPECT_NEAR(f.attention_factor, expected_["rope_attention_scaling"].get<double>(), 1e-6);
}

TEST_P(HfFixture, PrefillLogitsMatchAtEveryPosition) {
  for (size_t p = 0; p < prompts_.size(); ++p) {
    test::PagedRunner runner(*model_, backend_, 16, 16, 7 + p);
    const int seq = runner.add_sequence();
    const auto rows = runner.step({{seq, prompts_[p]}}, /*all_rows=*/true);
    ASSERT_EQ(rows.size(), prompts_[p].size());
    for (size_t t = 0; t < rows.size(); ++t) {
      expect_logits_match(
          rows[t], expected_["logits"][p][t],
          GetParam() + " prompt " + std::to_string(p) + " position " + std::to_string(t));
    }
  }
}

TEST_P(HfFixture, ChunkedPrefillReadsEarlierChunksFromTheCache) {
  // Chunks of 5 with blocks of 4: chunk and block boundaries do not line up.
  for (size_t p = 0; p < prompts_.size(); ++p) {
    test::PagedRunner runner(*model_, backend_, 40, 4, 11 + p);
    const int seq = runner.add_sequence();
    const std::vector<int>& prompt = prompts_[p];
    for (size_t begin = 0; begin < prompt.size(); begin += 5) {
      const size_t end = std::min(prompt.size(), begin + 5);
      const auto rows = runner.step(
          {{seq, std::vector<int>(prompt.begin() + begin, prompt.begin() + end)}}, true);
      ASSERT_EQ(rows.size(), end - begin);
      for (size_t t = begin; t < end; ++t) {
        expect_logits_match(
            rows[t - begin], expected_["logits"][p][t],
            GetParam() + " chunked prompt " + std::to_string(p) + " position " + std::to_string(t));
      }
    }
  }
}

TEST_P(HfFixture, GreedyMatchesTransformers) {
  for (size_t p = 0; p < prompts_.size(); ++p) {
    test::PagedRunner runner(*model_, backend_, 100, 1, 13 + p);  // one slot per block
    const int seq = runner.add_sequence();
    std::vector<int> out;
    auto rows = runner.step({{seq, prompts_[p]}}, false);
    while (true) {
      out.push_back(test::argmax(rows[0]));
      if (out.size() == greedy(p).size()) break;
      rows = runner.step({{seq, {out.back()}}}, false);
    }
    EXPECT_EQ(out, greedy(p)) << GetParam() << " prompt " << p;
  }
}

TEST_P(HfFixture, BatchedGreedyMatchesTransformers) {
  // Every prompt in one prefill step, then every sequence decoding in the same steps, on a
  // two-thread backend (the batched prefill is large enough for the ops to split).
  CpuBackend backend(2);
  auto model = CausalLM::load(dir_, backend);
  test::PagedRunner runner(*model, backend, 64, 16, 17);
  std::vector<std::pair<int, std::vector<int>>> work;
  for (const auto& prompt : prompts_) work.push_back({runner.add_sequence(), prompt});
  std::vector<std::vector<int>> out(prompts_.size());
  const size_t steps = greedy(0).size();
  for (size_t step = 0; step < steps; ++step) {
    const auto rows = runner.step(work, false);
    for (size_t p = 0; p < prompts_.size(); ++p) {
      out[p].push_back(test::argmax(rows[p]));
      work[p].second = {out[p].back()};
    }
  }
  for (size_t p = 0; p < prompts_.size(); ++p) {
    EXPECT_EQ(out[p], greedy(p)) << GetParam() << " prompt " << p;
  }
}

TEST_P(HfFixture, FusedOpsMatchTransformers) {
  // Steps of up to 8 tokens take CausalLM's fused path (norm_linear, linear_add,
  // silu_mul_linear_add): prompt chunks of 5 against HF's logits, then greedy decoding.
  CpuBackend backend(1);
  backend.set_fused_linear_max_rows(8);
  auto model = CausalLM::load(dir_, backend);
  for (size_t p = 0; p < prompts_.size(); ++p) {
    test::PagedRunner runner(*model, backend, 100, 4, 19 + p);
    const int seq = runner.add_sequence();
    const std::vector<int>& prompt = prompts_[p];
    std::vector<std::vector<float>> rows;
    for (size_t begin = 0; begin < prompt.size(); begin += 5) {
      const size_t end = std::min(prompt.size(), begin + 5);
      rows = runner.step({{seq, std::vector<int>(prompt.begin() + begin, prompt.begin() + end)}},
                         true);
      for (size_t t = begin; t < end; ++t) {
        expect_logits_match(rows[t - begin], expected_["logits"][p][t],
                            GetParam() + " fused, prompt " + std::to_string(p) + " position " +
                                std::to_string(t));
      }
    }
    std::vector<int> out = {test::argmax(rows.back())};
    while (out.size() < greedy(p).size()) {
      out.push_back(test::argmax(runner.step({{seq, {out.back()}}}, false)[0]));
    }
    EXPECT_EQ(out, greedy(p)) << GetParam() << " fused, prompt " << p;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, HfFixture, testing::ValuesIn(fixture_models()),
                         [](const testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST(HfFixtureData, IsPresent) {
  EXPECT_FALSE(fixture_models().empty()) << "no model folders with expected.json under "
                                         << fixture_root() << " (made by tools/make_hf_fixture.py)";
}

}  // namespace
}  // namespace kestrel
