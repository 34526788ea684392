// Sharded loading (load_model_weights with a ShardPlan): every rank's tensors are the slices
// of the whole model's that shard_plan.h's table names, on models that exercise each rule:
// a vocabulary that 4 ranks do not divide (zero padding), q/k/v biases (qwen2_tiny), an
// o_proj bias (rank 0 only), tied and untied LM heads. The same models then run sharded
// through CausalLM against the unsharded one.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "io/model_config.h"
#include "io/random_model.h"
#include "io/safetensors.h"
#include "model/architecture.h"
#include "model/model_weights.h"
#include "model/shard_plan.h"
#include "tp_runner.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

fs::path fixture(const std::string& name) {
  return fs::path(KESTREL_SOURCE_DIR) / "tests" / "data" / "hf" / name;
}

// A fresh folder per test (ctest runs tests as parallel processes).
fs::path scratch(const std::string& name) {
  const testing::TestInfo* test = testing::UnitTest::GetInstance()->current_test_info();
  std::string test_name = std::string(test->test_suite_name()) + "." + test->name();
  std::replace(test_name.begin(), test_name.end(), '/', '_');
  const fs::path dir =
      fs::path(KESTREL_BINARY_DIR) / "tensor_parallel_weights_test" / test_name / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Untied, F32, 10 tokens (4 ranks: 3 rows each, the last rank 2 of padding), 4 query heads
// over 2 KV heads (4 ranks replicate them).
std::string small_vocab_model() {
  RandomModelSpec spec;
  spec.vocab_size = 10;
  spec.hidden_size = 32;
  spec.intermediate_size = 64;
  spec.num_layers = 2;
  spec.num_heads = 4;
  spec.num_kv_heads = 2;
  spec.head_dim = 16;
  spec.tie_word_embeddings = false;
  spec.dtype = DType::kF32;
  spec.seed = 5;
  const std::string dir = scratch("small_vocab").string();
  write_random_model(spec, dir, "");
  return dir;
}

// qwen3_tiny with attention_bias on: q/k/v and o_proj biases (Qwen3 puts one on o_proj).
std::string biased_qwen3_model() {
  const fs::path dir = scratch("biased_qwen3");
  nlohmann::json config = read_json_file((fixture("qwen3_tiny") / "config.json").string());
  config["attention_bias"] = true;
  std::ofstream(dir / "config.json") << config.dump(2);
  const ModelConfig c = parse_model_config(config);
  const WeightStore store = WeightStore::open(fixture("qwen3_tiny").string());
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& n : store.names()) tensors.push_back({n, store.get(n).view()});
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.0f, 0.1f);
  const int64_t D = c.head_dim;
  const std::pair<const char*, int64_t> biases[] = {{"q_proj", c.num_attention_heads * D},
                                                    {"k_proj", c.num_key_value_heads * D},
                                                    {"v_proj", c.num_key_value_heads * D},
                                                    {"o_proj", c.hidden_size}};
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    for (const auto& [proj, n] : biases) {
      Tensor b = Tensor::host(DType::kF32, {n});
      for (int64_t i = 0; i < n; ++i) b.data_as<float>()[i] = dist(rng);
      tensors.push_back({fmt::format("model.layers.{}.self_attn.{}.bias", l, proj), b});
    }
  }
  write_safetensors((dir / "model.safetensors").string(), tensors);
  return dir.string();
}

// Rows [r0, r0 + nr) and columns [c0, c0 + nc) of an F32 host tensor (1-D: one column;
// nc < 0: every column).
std::vector<float> block(const Tensor& t, int64_t r0, int64_t nr, int64_t c0 = 0, int64_t nc = -1) {
  const int64_t cols = t.ndim() == 1 ? 1 : t.dim(1);
  if (nc < 0) nc = cols - c0;
  EXPECT_TRUE(t.dtype() == DType::kF32 && r0 + nr <= t.dim(0) && c0 + nc <= cols)
      << "block [" << r0 << ", +" << nr << ") x [" << c0 << ", +" << nc << ") of "
      << t.shape().str();
  std::vector<float> out;
  for (int64_t r = r0; r < std::min(r0 + nr, t.dim(0)); ++r) {
    const float* row = t.data_as<float>() + r * cols;
    out.insert(out.end(), row + c0, row + std::min(c0 + nc, cols));
  }
  return out;
}

void expect_vocab_shard(const Tensor& shard, const Tensor& full, const ShardPlan& p,
                        const std::string& what) {
  const int64_t V = full.dim(0), H = full.dim(1);
  const int64_t real = std::min(p.vocab_per_rank, V - p.vocab_start);
  ASSERT_EQ(shard.shape(), (Shape{p.vocab_per_rank, H})) << what;
  EXPECT_EQ(block(shard, 0, real), block(full, p.vocab_start, real)) << what;
  EXPECT_EQ(block(shard, real, p.vocab_per_rank - real),
            std::vector<float>((p.vocab_per_rank - real) * H, 0.0f))
      << what << ": padding rows";
}

void expect_shard_of(const ModelWeights& shard, const ModelWeights& full, const ModelConfig& c,
                     const ShardPlan& p, const std::string& where) {
  const int64_t D = c.head_dim, I = c.intermediate_size;
  const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const int64_t nq = p.num_q_heads * D, nkv = p.num_kv_heads * D, ni = p.intermediate;
  const int64_t q0 = p.q_head_start * D, kv0 = p.kv_head_start * D, i0 = p.intermediate_start;
  std::set<const void*> seen;
  size_t bytes = 0;
  const auto count = [&](const Tensor& t) {
    if (t.defined() && seen.insert(t.data()).second) bytes += t.nbytes();
  };
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& s = shard.layers[l];
    const LayerWeights& f = full.layers[l];
    const std::string at = where + " layer " + std::to_string(l);
    // qkv packs this rank's q rows, then its k rows, then its v rows.
    for (const auto& [name, ts, tf] :
         {std::tuple<const char*, const Tensor*, const Tensor*>{"qkv", &s.qkv, &f.qkv},
          {"qkv_bias", &s.qkv_bias, &f.qkv_bias}}) {
      ASSERT_EQ(ts->defined(), tf->defined()) << at << " " << name;
      if (!ts->defined()) continue;
      ASSERT_EQ(ts->dim(0), nq + 2 * nkv) << at << " " << name;
      EXPECT_EQ(block(*ts, 0, nq), block(*tf, q0, nq)) << at << " " << name << " q";
      EXPECT_EQ(block(*ts, nq, nkv), block(*tf, Hq * D + kv0, nkv)) << at << " " << name << " k";
      EXPECT_EQ(block(*ts, nq + nkv, nkv), block(*tf, (Hq + Hkv) * D + kv0, nkv))
          << at << " " << name << " v";
    }
    ASSERT_EQ(s.o_proj.shape(), (Shape{c.hidden_size, nq})) << at;
    EXPECT_EQ(block(s.o_proj, 0, c.hidden_size), block(f.o_proj, 0, c.hidden_size, q0, nq))
        << at << " o_proj";
    if (p.rank == 0 && f.o_bias.defined()) {
      EXPECT_EQ(block(s.o_bias, 0, c.hidden_size), block(f.o_bias, 0, c.hidden_size)) << at;
    } else {
      EXPECT_FALSE(s.o_bias.defined()) << at << ": o_proj bias on rank " << p.rank;
    }
    ASSERT_EQ(s.gate_up.shape(), (Shape{2 * ni, c.hidden_size})) << at;
    EXPECT_EQ(block(s.gate_up, 0, ni), block(f.gate_up, i0, ni)) << at << " gate";
    EXPECT_EQ(block(s.gate_up, ni, ni), block(f.gate_up, I + i0, ni)) << at << " up";
    ASSERT_EQ(s.down.shape(), (Shape{c.hidden_size, ni})) << at;
    EXPECT_EQ(block(s.down, 0, c.hidden_size), block(f.down, 0, c.hidden_size, i0, ni))
        << at << " down";
    EXPECT_EQ(block(s.input_norm, 0, c.hidden_size), block(f.input_norm, 0, c.hidden_size));
    EXPECT_EQ(block(s.post_norm, 0, c.hidden_size), block(f.post_norm, 0, c.hidden_size));
    for (const Tensor* t : {&s.input_norm, &s.qkv, &s.qkv_bias, &s.q_norm, &s.k_norm, &s.o_proj,
                            &s.o_bias, &s.post_norm, &s.gate_up, &s.down}) {
      count(*t);
    }
  }
  expect_vocab_shard(shard.embed, full.embed, p, where + " embed_tokens");
  expect_vocab_shard(shard.lm_head, full.lm_head, p, where + " lm_head");
  EXPECT_EQ(shard.lm_head.data() == shard.embed.data(), c.tie_word_embeddings) << where;
  for (const Tensor* t : {&shard.embed, &shard.final_norm, &shard.lm_head}) count(*t);
  EXPECT_EQ(shard.bytes, bytes) << where << ": bytes counts this rank's tensors";
}

class ShardedWeights : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "small_vocab") {
      dir_ = small_vocab_model();
    } else if (GetParam() == "biased_qwen3") {
      dir_ = biased_qwen3_model();
    } else {
      dir_ = fixture(GetParam()).string();
    }
  }
  const std::string& dir() const { return dir_; }
  std::string dir_;
};

TEST_P(ShardedWeights, EveryRankHoldsItsSlices) {
  const ModelConfig c = load_model_config(dir());
  const WeightStore store = WeightStore::open(dir());
  const ArchitectureSpec& arch = find_architecture(c.architecture);
  CpuBackend backend(1);
  const ModelWeights full = load_model_weights(store, c, arch, backend);
  for (int n : {1, 2, 4}) {
    for (int r = 0; r < n; ++r) {
      const ShardPlan p = ShardPlan::make(c, r, n);
      expect_shard_of(load_model_weights(store, c, arch, backend, p), full, c, p,
                      GetParam() + " rank " + std::to_string(r) + " of " + std::to_string(n));
    }
  }
}

TEST_P(ShardedWeights, ShardedModelMatchesTheUnshardedOne) {
  // Prompts of 1, 5 and 12 tokens, ids across the whole vocabulary (every rank's shard).
  const ModelConfig c = load_model_config(dir());
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> pick(0, c.vocab_size - 1);
  std::vector<std::vector<int>> prompts;
  for (int len : {1, 5, 12}) {
    prompts.emplace_back(len);
    for (int& id : prompts.back()) id = pick(rng);
  }
  prompts.back()[0] = c.vocab_size - 1;  // the last rank's last real row
  CpuBackend backend(1);
  auto model = CausalLM::load(dir(), backend);
  const test::Outputs single = test::run_prompts(*model, backend, prompts, 8);
  for (int n : {2, 4}) {
    const auto tp = test::run_tensor_parallel(dir(), n, prompts, 8);
    const std::string where = GetParam() + " on " + std::to_string(n) + " ranks";
    test::expect_ranks_match_single(tp, single, where);
    EXPECT_EQ(tp[0].greedy, single.greedy) << where;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ShardedWeights,
                         testing::Values("small_vocab", "biased_qwen3", "qwen2_tiny", "llama_tiny",
                                         "qwen3_tiny_bf16"),
                         [](const testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace kestrel
