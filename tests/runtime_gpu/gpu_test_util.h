// Helpers of the GPU end-to-end tests: the HF fixtures (tests/data/hf), one-shot prefill
// logits on any backend, HF's top-2 margins along its greedy path (from the fp32 CPU
// backend, which matches HF to 1e-4: tests/model), and an engine whose runner is visible.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "engine/llm_engine.h"
#include "io/model_config.h"
#include "model/causal_lm.h"
#include "runtime/engine_limits.h"
#include "runtime/model_runner.h"

namespace kestrel::test {

namespace fs = std::filesystem;

#define KS_SKIP_WITHOUT_GPU() \
  if (!::kestrel::cuda_device_available()) GTEST_SKIP() << "no CUDA device"

struct HfFixture {
  std::string name, dir;
  std::vector<std::vector<int>> prompts;
  std::vector<std::vector<int>> greedy;
  std::vector<std::vector<std::vector<float>>> logits;  // [prompt][position][vocab]
};

inline std::vector<HfFixture> load_hf_fixtures() {
  std::vector<HfFixture> out;
  const fs::path root = fs::path(KESTREL_SOURCE_DIR) / "tests/data/hf";
  for (const auto& e : fs::directory_iterator(root)) {
    if (!fs::exists(e.path() / "expected.json")) continue;
    const nlohmann::json j = read_json_file((e.path() / "expected.json").string());
    HfFixture f;
    f.name = e.path().filename().string();
    f.dir = e.path().string();
    f.prompts = j["prompts"].get<std::vector<std::vector<int>>>();
    f.greedy = j["greedy"].get<std::vector<std::vector<int>>>();
    f.logits = j["logits"].get<std::vector<std::vector<std::vector<float>>>>();
    out.push_back(std::move(f));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

// Logits F32 [tokens.size(), V] of one sequence prefilled in a single forward, every row.
inline std::vector<std::vector<float>> prefill_logits(CausalLM& model, Backend& backend,
                                                      const std::vector<int>& tokens) {
  const int n = static_cast<int>(tokens.size());
  const int block = 16, blocks = (n + block - 1) / block;
  std::vector<LayerKvCache> kv = backend.allocate_kv_cache(model.kv_cache_spec(blocks, block));
  std::vector<int> positions(n), rows(n), table(blocks);
  std::iota(positions.begin(), positions.end(), 0);
  std::iota(rows.begin(), rows.end(), 0);
  // Blocks in reverse order, so that a kernel ignoring the block table fails.
  for (int b = 0; b < blocks; ++b) table[b] = blocks - 1 - b;
  std::vector<int> slots(n);
  for (int p = 0; p < n; ++p) slots[p] = table[p / block] * block + p % block;
  auto up = [&](std::vector<int>& v, Shape s) {
    return backend.upload(Tensor(v.data(), DType::kI32, s), DType::kI32);
  };
  std::vector<int> qsl{0, n}, lens{n}, ids = tokens;
  AttentionMetadata meta;
  meta.num_tokens = n;
  meta.num_seqs = 1;
  meta.max_query_len = n;
  meta.max_seq_len = n;
  meta.block_size = block;
  meta.positions = up(positions, {n});
  meta.slot_mapping = up(slots, {n});
  meta.query_start_loc = up(qsl, {2});
  meta.seq_lens = up(lens, {1});
  meta.block_tables = up(table, {1, blocks});
  const Tensor logits = backend.to_host(model.forward(up(ids, {n}), meta, kv, up(rows, {n})));
  const int64_t V = logits.dim(1);
  std::vector<std::vector<float>> out;
  for (int r = 0; r < n; ++r) {
    const float* p = logits.data_as<float>() + r * V;
    out.emplace_back(p, p + V);
  }
  return out;
}

// Top-1 minus top-2 logit of HF's greedy step k (0..19) for each prompt, from the fp32 CPU
// backend run over prompt + greedy[:19] (teacher forcing along HF's path).
inline std::vector<std::vector<double>> hf_greedy_margins(const HfFixture& f) {
  CpuBackend cpu(2);
  std::unique_ptr<CausalLM> model = CausalLM::load(f.dir, cpu);
  std::vector<std::vector<double>> margins;
  for (size_t p = 0; p < f.prompts.size(); ++p) {
    std::vector<int> tokens = f.prompts[p];
    tokens.insert(tokens.end(), f.greedy[p].begin(), f.greedy[p].end() - 1);
    const auto logits = prefill_logits(*model, cpu, tokens);
    std::vector<double> m;
    for (size_t k = 0; k < f.greedy[p].size(); ++k) {
      std::vector<float> row = logits[f.prompts[p].size() - 1 + k];
      std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<float>());
      m.push_back(static_cast<double>(row[0]) - row[1]);
    }
    margins.push_back(std::move(m));
  }
  return margins;
}

// How many leading steps of `got` (a free-running greedy continuation, possibly shorter than
// HF's) were compared with HF's greedy tokens, up to the first step whose HF margin is below
// `threshold` (after a near tie the two continuations may part for good), and whether they
// all matched.
struct GreedyMatch {
  int compared = 0;
  int total = 0;
  bool all_equal = true;
  std::string first_mismatch;
};

inline GreedyMatch match_greedy(const std::vector<int>& got, const std::vector<int>& want,
                                const std::vector<double>& margins, double threshold) {
  GreedyMatch m;
  m.total = static_cast<int>(std::min(want.size(), got.size()));
  for (int k = 0; k < m.total && margins[k] >= threshold; ++k) {
    ++m.compared;
    if (got[k] != want[k]) {
      m.all_equal = false;
      m.first_mismatch = "step " + std::to_string(k) + ": got " + std::to_string(got[k]) +
                         ", HF " + std::to_string(want[k]) + " (margin " +
                         std::to_string(margins[k]) + ", threshold " + std::to_string(threshold) + ")";
      break;
    }
  }
  return m;
}

// An engine over a ModelRunner, as kestrel::LLM builds it, with the runner in reach.
class TestEngine {
 public:
  TestEngine(const std::string& dir, const EngineConfig& config)
      : runner_(std::make_unique<ModelRunner>(dir, config)),
        engine_(std::make_unique<LLMEngine>(
            resolve_engine_limits(config, *runner_, runner_->eos_token_ids()), *runner_)) {}

  // Outputs (first sample) in prompt order; params[i] or params[0] for every prompt.
  std::vector<CompletionOutput> generate(const std::vector<std::vector<int>>& prompts,
                                         const std::vector<SamplingParams>& params) {
    std::unordered_map<std::string, size_t> index;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const std::string id = "r" + std::to_string(next_++);
      index[id] = i;
      engine_->add_request(id, prompts[i], params.size() == 1 ? params[0] : params[i]);
    }
    std::vector<CompletionOutput> out(prompts.size());
    while (engine_->has_unfinished()) {
      for (RequestOutput& r : engine_->step()) {
        if (r.finished) out[index.at(r.request_id)] = r.outputs.at(0);
      }
    }
    return out;
  }

  ModelRunner& runner() { return *runner_; }
  LLMEngine& engine() { return *engine_; }

 private:
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<LLMEngine> engine_;
  int next_ = 0;
};

inline SamplingParams greedy(int max_tokens, int logprobs = -1) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.ignore_eos = true;
  p.max_tokens = max_tokens;
  if (logprobs >= 0) p.logprobs = logprobs;
  return p;
}

// A small GPU configuration: explicit KV blocks (no profile), few graph sizes.
inline EngineConfig gpu_config() {
  EngineConfig c;
  c.device = "cuda";
  c.num_kv_blocks = 256;
  c.max_num_seqs = 32;
  c.max_num_batched_tokens = 512;
  return c;
}

}  // namespace kestrel::test

namespace kestrel::test {

// Per fixture: HF's data, its greedy margins, and the CUDA backend's logits along HF's path
// (prompt + HF's greedy tokens in one prefill): at the prompt positions they are compared
// with HF's logits; at the greedy steps they give the GPU's teacher-forced argmax.
struct FixtureOracle {
  HfFixture fixture;
  std::vector<std::vector<double>> margins;  // [prompt][step], HF's top-1 - top-2 (fp32)
  std::vector<std::vector<int>> gpu_argmax;  // [prompt][step], teacher-forced on the GPU
  double max_abs_error = 0;   // max |GPU - HF| over every prompt position's logits
  double worst_rel_l2 = 0;    // max over positions of ||GPU - HF|| / ||HF||
  double worst_rel_max = 0;   // max over positions of max|GPU - HF| / max|HF|
  // Max over prompt positions of how far the GPU moves HF's top-1 - top-2 margin: the bf16
  // noise on exactly the quantity that decides a greedy step.
  double margin_error = 0;
  // Steps whose HF margin is below this are near ties that bf16 may break either way: three
  // times the measured margin noise (the generated positions sit deeper in the context than
  // the prompt positions it was measured on, and decode steps round differently).
  double threshold() const { return std::max(3.0 * margin_error, 0.05); }
};

inline const std::vector<FixtureOracle>& fixture_oracles() {
  static const std::vector<FixtureOracle> oracles = [] {
    std::vector<FixtureOracle> out;
    std::unique_ptr<Backend> gpu = make_cuda_backend(0);
    for (HfFixture& f : load_hf_fixtures()) {
      FixtureOracle o;
      o.margins = hf_greedy_margins(f);
      std::unique_ptr<CausalLM> model = CausalLM::load(f.dir, *gpu);
      for (size_t p = 0; p < f.prompts.size(); ++p) {
        std::vector<int> tokens = f.prompts[p];
        tokens.insert(tokens.end(), f.greedy[p].begin(), f.greedy[p].end() - 1);
        const auto got = prefill_logits(*model, *gpu, tokens);
        const size_t n = f.prompts[p].size();
        for (size_t pos = 0; pos < n; ++pos) {
          const std::vector<float>& want = f.logits[p][pos];
          double d2 = 0, r2 = 0, dmax = 0, rmax = 0;
          for (size_t v = 0; v < want.size(); ++v) {
            const double d = std::abs(double(got[pos][v]) - want[v]);
            d2 += d * d;
            r2 += double(want[v]) * want[v];
            dmax = std::max(dmax, std::isnan(d) ? INFINITY : d);
            rmax = std::max(rmax, std::abs(double(want[v])));
          }
          o.max_abs_error = std::max(o.max_abs_error, dmax);
          o.worst_rel_l2 = std::max(o.worst_rel_l2, std::sqrt(d2 / r2));
          o.worst_rel_max = std::max(o.worst_rel_max, dmax / rmax);
          std::vector<int> ids(want.size());
          std::iota(ids.begin(), ids.end(), 0);
          std::partial_sort(ids.begin(), ids.begin() + 2, ids.end(),
                            [&](int a, int b) { return want[a] > want[b]; });
          const double hf_margin = double(want[ids[0]]) - want[ids[1]];
          const double gpu_margin = double(got[pos][ids[0]]) - got[pos][ids[1]];
          o.margin_error = std::max(o.margin_error, std::abs(gpu_margin - hf_margin));
        }
        std::vector<int> argmax;
        for (size_t k = 0; k < f.greedy[p].size(); ++k) {
          const std::vector<float>& row = got[n - 1 + k];
          argmax.push_back(static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin()));
        }
        o.gpu_argmax.push_back(std::move(argmax));
      }
      o.fixture = std::move(f);
      out.push_back(std::move(o));
    }
    return out;
  }();
  return oracles;
}

}  // namespace kestrel::test
