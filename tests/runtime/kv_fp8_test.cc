// The fp8 KV cache end to end on the CPU: the kv_cache_dtype setting, the scales (from the
// checkpoint, rounded up to powers of two and sharded; from the calibration prompt), and the
// engine's outputs against a reference that quantizes K/V through the contract on its own
// (fake_quant_backend.h).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "../model/paged_runner.h"
#include "core/error.h"
#include "fake_quant_backend.h"
#include "io/model_config.h"
#include "io/random_model.h"
#include "io/safetensors.h"
#include "kestrel/llm.h"
#include "model/causal_lm.h"
#include "runtime/engine_limits.h"
#include "runtime/kv_scales.h"
#include "runtime/model_runner.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

// The smallest power of two >= x, by search.
double pow2_at_least(double x) {
  double p = std::ldexp(1.0, -149);
  while (p < x) p *= 2;
  return p;
}

// A 2-layer model (4 query heads over 2 KV heads of 32, vocabulary 512) in a fresh directory,
// with `scales` (name -> F32 values of shape `shape`) added to its model.safetensors.
struct ScaleTensor {
  std::vector<float> values;
  Shape shape;
};
std::string write_model(const std::string& name, const std::map<std::string, ScaleTensor>& scales) {
  const fs::path dir = fs::path(KESTREL_BINARY_DIR) / "kv_fp8_test" / name;
  fs::remove_all(dir);
  RandomModelSpec spec;
  spec.vocab_size = 512;
  spec.max_position_embeddings = 1024;
  spec.seed = 16;
  write_random_model(spec, dir.string(), "");
  if (scales.empty()) return dir.string();
  const std::string file = (dir / "model.safetensors").string();
  {
    const auto src = SafetensorsFile::open(file);
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const auto& [n, info] : src->tensors()) tensors.emplace_back(n, info.view());
    for (const auto& [n, s] : scales) {
      Tensor t = Tensor::host(DType::kF32, s.shape);
      std::copy(s.values.begin(), s.values.end(), t.data_as<float>());
      tensors.emplace_back(n, t);
    }
    write_safetensors(file + ".new", tensors);
  }
  fs::rename(file + ".new", file);
  return dir.string();
}

std::string attn(int layer, const char* what) {
  return "model.layers." + std::to_string(layer) + ".self_attn." + what;
}

// Layer 0: k_scale one value, v_scale one per KV head; layer 1: the older kv_scale.
const std::map<std::string, ScaleTensor>& checkpoint_scales() {
  static const std::map<std::string, ScaleTensor> s{
      {attn(0, "k_scale"), {{0.0123f}, Shape{}}},
      {attn(0, "v_scale"), {{0.003f, 0.0039f}, Shape{2}}},
      {attn(1, "kv_scale"), {{0.02f}, Shape{1}}}};
  return s;
}

// What those must become, K heads then V heads per layer, for the heads [first, first + n).
std::vector<std::vector<float>> expected_checkpoint_scales(int first, int n) {
  const double k0 = pow2_at_least(0.0123f), v0[2] = {pow2_at_least(0.003f), pow2_at_least(0.0039f)};
  const double kv1 = pow2_at_least(0.02f);
  std::vector<std::vector<float>> want(2);
  for (int j = 0; j < n; ++j) want[0].push_back(static_cast<float>(k0));
  for (int j = 0; j < n; ++j) want[0].push_back(static_cast<float>(v0[first + j]));
  want[1].assign(2 * n, static_cast<float>(kv1));
  return want;
}

EngineConfig fp8_config() {
  EngineConfig c;
  c.device = "cpu";
  c.num_threads = 2;
  c.num_kv_blocks = 128;
  c.kv_cache_dtype = "fp8";
  return c;
}

std::vector<std::vector<float>> cache_scales(Backend& be, const std::vector<LayerKvCache>& kv) {
  std::vector<std::vector<float>> out;
  for (const LayerKvCache& l : kv) {
    Tensor h = be.to_host(l.scale);
    out.emplace_back(h.data_as<float>(), h.data_as<float>() + h.numel());
  }
  return out;
}

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.ignore_eos = true;
  p.max_tokens = max_tokens;
  return p;
}

const std::vector<std::vector<int>> kPrompts{
    {1, 17, 300, 42, 9, 5, 77, 401, 3}, {250, 251, 252}, {7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
                                                          7, 7, 7, 7, 7, 7, 7, 8, 9, 10, 11}};

// Greedy tokens of `prompt` through the reference, and their log-probabilities (in
// double): the prompt in one step, then one token per step, each sampled token stored by
// the next step (as the engine does).
struct Greedy {
  std::vector<int> tokens;
  std::vector<double> logprobs;
};
Greedy reference_greedy(const std::string& dir, test::FakeQuantBackend& be,
                        const std::vector<int>& prompt, int max_tokens) {
  auto model = CausalLM::load(dir, be);
  test::PagedRunner runner(*model, be, 64, 16, 1);
  const int seq = runner.add_sequence();
  Greedy g;
  std::vector<float> row = runner.step({{seq, prompt}}, false)[0];
  while (true) {
    const int t = test::argmax(row);
    double sum = 0.0;
    for (float x : row) sum += std::exp(double(x) - row[t]);
    g.tokens.push_back(t);
    g.logprobs.push_back(-std::log(sum));
    if (static_cast<int>(g.tokens.size()) == max_tokens) return g;
    row = runner.step({{seq, {t}}}, false)[0];
  }
}

// The largest |logprob difference| of an engine's greedy tokens from the reference's.
double max_logprob_diff(const CompletionOutput& out, const Greedy& want) {
  double worst = 0.0;
  for (size_t k = 0; k < want.logprobs.size(); ++k) {
    worst = std::max(worst, std::abs(out.logprobs.at(k).logprob - want.logprobs[k]));
  }
  return worst;
}

TEST(KvCacheDtype, AcceptsVllmNames) {
  EXPECT_FALSE(kv_cache_is_fp8("auto"));
  EXPECT_FALSE(kv_cache_is_fp8("bf16"));
  EXPECT_TRUE(kv_cache_is_fp8("fp8"));
  EXPECT_TRUE(kv_cache_is_fp8("fp8_e4m3"));
  for (const char* bad : {"FP8", "fp8_e5m2", "int8", ""}) {
    try {
      kv_cache_is_fp8(bad);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("auto, bf16, fp8, fp8_e4m3"), std::string::npos);
      EXPECT_NE(std::string(e.what()).find("'" + std::string(bad) + "'"), std::string::npos);
    }
  }
  EngineConfig c = fp8_config();
  c.kv_cache_dtype = "e4m3";
  EXPECT_THROW(LLM(write_model("bad_dtype", {}), c), Error);
}

TEST(KvScales, RoundUpAndCalibrationRule) {
  for (float x : {1.0f, 1.5f, 0.3f, 0x1p-20f, 3e-5f, 448.0f, 0x1.000002p3f, 1e30f}) {
    EXPECT_EQ(round_up_pow2(x), pow2_at_least(x)) << x;
  }
  EXPECT_EQ(calibrated_kv_scale(0.0f), 0x1p-10f);     // the floor
  EXPECT_EQ(calibrated_kv_scale(0.05f), 0x1p-10f);    // 4.5e-4 -> 2^-11, raised to the floor
  EXPECT_EQ(calibrated_kv_scale(112.0f), 1.0f);       // 112 x 4 / 448 = 1 exactly
  EXPECT_EQ(calibrated_kv_scale(112.01f), 2.0f);
  EXPECT_EQ(calibrated_kv_scale(3.0f), 0x1p-5f);      // 0.0268 -> 0.03125
  EXPECT_THROW(calibrated_kv_scale(INFINITY), Error);
  EXPECT_THROW(calibrated_kv_scale(NAN), Error);
}

TEST(KvScales, FromCheckpointRoundedUpAndSharded) {
  const std::string dir = write_model("scaled", checkpoint_scales());
  const ModelConfig config = load_model_config(dir);
  const WeightStore weights = WeightStore::open(dir);
  EXPECT_EQ(*checkpoint_kv_scales(weights, config, ShardPlan::make(config, 0, 1)),
            expected_checkpoint_scales(0, 2));
  // Two ranks: one KV head each; four: each replicates its query heads' KV head.
  EXPECT_EQ(*checkpoint_kv_scales(weights, config, ShardPlan::make(config, 1, 2)),
            expected_checkpoint_scales(1, 1));
  EXPECT_EQ(*checkpoint_kv_scales(weights, config, ShardPlan::make(config, 1, 4)),
            expected_checkpoint_scales(0, 1));
  EXPECT_EQ(*checkpoint_kv_scales(weights, config, ShardPlan::make(config, 3, 4)),
            expected_checkpoint_scales(1, 1));

  // The engine takes them as they are (no calibration).
  ModelRunner runner(dir, fp8_config());
  EXPECT_EQ(cache_scales(runner.backend(), runner.kv_cache()), expected_checkpoint_scales(0, 2));
  // Without the names: no scales from the checkpoint.
  const std::string plain = write_model("plain", {});
  EXPECT_FALSE(checkpoint_kv_scales(WeightStore::open(plain), config, ShardPlan::make(config, 0, 1)));
}

TEST(KvScales, BadCheckpointScalesAreErrors) {
  auto expect_error = [](const std::string& name, std::map<std::string, ScaleTensor> scales,
                         const std::string& message) {
    const std::string dir = write_model(name, scales);
    try {
      LLM llm(dir, fp8_config());
      ADD_FAILURE() << name;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  auto s = checkpoint_scales();
  s[attn(0, "k_scale")] = {{-1.0f}, Shape{}};
  expect_error("negative", s, "'" + attn(0, "k_scale") + "' holds -1");
  s = checkpoint_scales();
  s[attn(0, "v_scale")] = {{INFINITY, 1.0f}, Shape{2}};
  expect_error("infinite", s, "'" + attn(0, "v_scale") + "' holds inf");
  s = checkpoint_scales();
  s[attn(0, "v_scale")] = {{1.0f, 1.0f, 1.0f}, Shape{3}};
  expect_error("shape", s, "one value or one per KV head (2)");
  s = checkpoint_scales();
  s.erase(attn(1, "kv_scale"));
  expect_error("partial", s, "scales for 1 of 2 layers");
  s = checkpoint_scales();
  s.erase(attn(0, "v_scale"));
  expect_error("k_only", s, "has " + attn(0, "k_scale") + " but not " + attn(0, "v_scale"));
}

// The fp8 engine against the fake-quantizing F32 reference with the same scales: the same
// greedy tokens with the same log-probabilities (to the rounding of the engine's
// log-softmax, in f32), and the same clamp count (scales a quarter of the checkpoint's make
// some). The F32 cache's log-probabilities, printed, show how far the quantization moves
// them: the tolerance is far below that.
TEST(Fp8Engine, MatchesFakeQuantizedReference) {
  constexpr double kTolerance = 2e-5;
  for (float shrink : {1.0f, 0.25f}) {
    auto scales = checkpoint_scales();
    for (auto& [name, s] : scales) {
      for (float& v : s.values) v *= shrink;
    }
    const std::string dir = write_model(shrink == 1.0f ? "ref" : "ref_clamped", scales);
    const auto want_scales = [&] {
      const ModelConfig c = load_model_config(dir);
      return *checkpoint_kv_scales(WeightStore::open(dir), c, ShardPlan::make(c, 0, 1));
    }();
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      SCOPED_TRACE(testing::Message() << "shrink " << shrink << " prompt " << i);
      test::FakeQuantBackend ref(2, want_scales);
      const Greedy want = reference_greedy(dir, ref, kPrompts[i], 12);
      SamplingParams params = greedy(12);
      params.logprobs = 0;
      LLM llm(dir, fp8_config());
      const auto out = llm.generate({kPrompts[i]}, params, false);
      EXPECT_EQ(out.at(0).outputs.at(0).token_ids, want.tokens);
      EXPECT_LE(max_logprob_diff(out[0].outputs[0], want), kTolerance);
      EngineConfig f32 = fp8_config();
      f32.kv_cache_dtype = "auto";
      const auto unquantized = LLM(dir, f32).generate({kPrompts[i]}, params, false);
      if (unquantized[0].outputs[0].token_ids == want.tokens) {
        std::printf("shrink %.2f prompt %zu: F32 cache's logprobs differ by up to %.2e\n", shrink,
                    i, max_logprob_diff(unquantized[0].outputs[0], want));
      }
      int64_t clamped = 0;
      for (const auto& layer : ref.clamped()) {
        for (int64_t c : layer) clamped += c;
      }
      EXPECT_EQ(llm.stats().kv_cache_clamped, clamped);  // read when the engine went idle
      EXPECT_EQ(llm.kv_cache_clamped(), clamped);
      EXPECT_EQ(llm.stats().kv_cache_dtype, "fp8_e4m3");
      EXPECT_EQ(llm.stats().kv_cache_element_bytes, 1);
      if (shrink < 1.0f && i == 0) {
        EXPECT_GT(clamped, 0);
      }
    }
  }
}

// Without scales in the checkpoint: the calibration prompt (512 deterministic ids, as the
// runner makes them, in chunks of the step budget) run through the reference with every
// scale 1 gives the amax from which the scales must follow by the rule; then nothing has
// been counted yet.
TEST(Fp8Engine, CalibrationCoversTheCalibrationPrompt) {
  const std::string dir = write_model("calibrated", {});
  EngineConfig c = fp8_config();
  c.max_num_batched_tokens = 200;
  ModelRunner runner(dir, c);
  std::vector<int> ids;
  for (int i = 0; i < 512; ++i) ids.push_back((i * 7 + 1) % 512);
  test::FakeQuantBackend ref(2, {std::vector<float>(4, 1.0f), std::vector<float>(4, 1.0f)});
  auto model = CausalLM::load(dir, ref);
  test::PagedRunner paged(*model, ref, 64, 16, 1);
  const int seq = paged.add_sequence();
  for (size_t begin = 0; begin < ids.size(); begin += 200) {
    const size_t end = std::min(ids.size(), begin + 200);
    paged.step({{seq, std::vector<int>(ids.begin() + begin, ids.begin() + end)}}, false);
  }
  const auto got = cache_scales(runner.backend(), runner.kv_cache());
  for (size_t l = 0; l < got.size(); ++l) {
    for (size_t i = 0; i < got[l].size(); ++i) {
      const double amax = ref.amax()[l][i];
      EXPECT_EQ(got[l][i], std::max(0x1p-10, pow2_at_least(amax * 4 / 448))) << l << " " << i;
      EXPECT_GE(got[l][i] * 448.0, amax * 4);
    }
  }
  for (const LayerKvCache& l : runner.kv_cache()) {
    Tensor amax = runner.backend().to_host(l.amax), clamped = runner.backend().to_host(l.clamped);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(amax.data_as<float>()[i], 0.0f);
      EXPECT_EQ(clamped.data_as<int64_t>()[i], 0);
    }
  }
}

// Blocks of the new size under the engine's invariants: batched, one at a time, chunked
// prefill, prefix-cache hits and forced preemption give the same fp8 tokens. Their
// agreement with the F32 cache's tokens is measured and printed, not asserted.
TEST(Fp8Engine, EngineInvariantsHold) {
  // The checkpoint's scales: calibration would differ between these configurations (its
  // prompt is no longer than the cache, which the preemption case makes tiny).
  const std::string dir = write_model("invariants", checkpoint_scales());
  auto run = [&](EngineConfig c, bool one_at_a_time = false, int passes = 1) {
    LLM llm(dir, c);
    std::vector<std::vector<int>> tokens;
    for (int p = 0; p < passes; ++p) {
      tokens.clear();
      if (one_at_a_time) {
        for (const auto& prompt : kPrompts) {
          tokens.push_back(llm.generate({prompt}, greedy(16), false).at(0).outputs.at(0).token_ids);
        }
      } else {
        for (const auto& o : llm.generate(kPrompts, greedy(16), false)) {
          tokens.push_back(o.outputs.at(0).token_ids);
        }
      }
    }
    return std::pair{tokens, llm.stats()};
  };
  const std::vector<std::vector<int>> base = run(fp8_config()).first;
  EXPECT_EQ(run(fp8_config(), true).first, base) << "one at a time";
  EngineConfig chunked = fp8_config();
  chunked.max_num_batched_tokens = 7;
  chunked.block_size = 4;
  EXPECT_EQ(run(chunked).first, base) << "chunked prefill";
  const auto [again, cached] = run(fp8_config(), false, 2);
  EXPECT_EQ(again, base) << "prefix cache hits";
  EXPECT_GT(cached.prefix_cache_hit_rate, 0.0);
  EngineConfig tight = fp8_config();
  tight.block_size = 4;
  tight.num_kv_blocks = 12;  // 48 slots: the longest sequence (24 + 16) fits alone only
  const auto [preempted, pstats] = run(tight);
  EXPECT_EQ(preempted, base) << "forced preemption";
  EXPECT_GT(pstats.num_preemptions, 0);

  EngineConfig f32 = fp8_config();
  f32.kv_cache_dtype = "auto";
  const auto [full, fstats] = run(f32);
  EXPECT_EQ(fstats.kv_cache_dtype, "f32");
  EXPECT_EQ(fstats.kv_cache_element_bytes, 4);
  int same = 0, total = 0, prefix = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    size_t k = 0;
    while (k < base[i].size() && base[i][k] == full[i][k]) ++k;
    prefix += static_cast<int>(k);
    for (size_t j = 0; j < base[i].size(); ++j) same += base[i][j] == full[i][j];
    total += static_cast<int>(base[i].size());
  }
  std::printf("fp8 vs f32 KV cache, tiny random model: %d of %d greedy tokens equal, %d in the "
              "common prefixes\n", same, total, prefix);
}

}  // namespace
}  // namespace kestrel
