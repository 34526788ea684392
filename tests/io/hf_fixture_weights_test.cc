// Reading safetensors files written by the reference implementation (through transformers'
// save_pretrained): names and shapes as HF lays them out, and the bf16/f16 copies equal to
// the f32 weights rounded, which HF did with torch's rounding.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "io/model_config.h"
#include "io/safetensors.h"
#include "io_test_util.h"

namespace kestrel {
namespace {

const std::string kHf = std::string(KESTREL_SOURCE_DIR) + "/tests/data/hf/";

// The tensor names and shapes HF's Qwen3 uses, spelled out by hand for the fixture's sizes.
std::map<std::string, Shape> qwen3_tiny_layout() {
  std::map<std::string, Shape> m;
  m["model.embed_tokens.weight"] = Shape{512, 64};
  m["model.norm.weight"] = Shape{64};
  for (int i = 0; i < 3; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    m[p + "input_layernorm.weight"] = Shape{64};
    m[p + "post_attention_layernorm.weight"] = Shape{64};
    m[p + "self_attn.q_proj.weight"] = Shape{128, 64};  // 4 heads x head_dim 32
    m[p + "self_attn.k_proj.weight"] = Shape{64, 64};   // 2 KV heads x 32
    m[p + "self_attn.v_proj.weight"] = Shape{64, 64};
    m[p + "self_attn.o_proj.weight"] = Shape{64, 128};
    m[p + "self_attn.q_norm.weight"] = Shape{32};
    m[p + "self_attn.k_norm.weight"] = Shape{32};
    m[p + "mlp.gate_proj.weight"] = Shape{128, 64};
    m[p + "mlp.up_proj.weight"] = Shape{128, 64};
    m[p + "mlp.down_proj.weight"] = Shape{64, 128};
  }
  return m;  // tied: no lm_head.weight
}

TEST(HfFixtureWeights, Qwen3TinyLayout) {
  WeightStore store = WeightStore::open(kHf + "qwen3_tiny");
  const auto layout = qwen3_tiny_layout();
  EXPECT_EQ(store.names().size(), layout.size());
  for (const auto& [name, shape] : layout) {
    const TensorInfo& t = store.get(name, shape);
    EXPECT_EQ(t.dtype, DType::kF32) << name;
    EXPECT_EQ(t.nbytes, static_cast<size_t>(shape.numel()) * 4) << name;
  }
  EXPECT_FALSE(store.has("lm_head.weight"));
}

TEST(HfFixtureWeights, UntiedAndBiasedModels) {
  WeightStore qwen2 = WeightStore::open(kHf + "qwen2_tiny");
  qwen2.get("lm_head.weight", Shape{512, 64});
  qwen2.get("model.layers.1.self_attn.q_proj.bias", Shape{64});  // 4 heads x head_dim 16
  qwen2.get("model.layers.1.self_attn.k_proj.bias", Shape{32});
  qwen2.get("model.layers.1.self_attn.v_proj.bias", Shape{32});
  EXPECT_FALSE(qwen2.has("model.layers.0.self_attn.o_proj.bias"));
  EXPECT_FALSE(qwen2.has("model.layers.0.self_attn.q_norm.weight"));
  WeightStore llama = WeightStore::open(kHf + "llama_tiny");
  llama.get("model.layers.0.self_attn.k_proj.weight", Shape{16, 64});  // 1 KV head
  llama.get("lm_head.weight", Shape{512, 64});
}

// qwen3_tiny_{bf16,f16} hold the same weights as qwen3_tiny, rounded by torch; our
// conversions must agree with torch's rounding bit for bit.
void expect_rounded_copy(const std::string& name, DType dtype) {
  auto expected_json = read_json_file(kHf + name + "/expected.json");
  auto f32_json = read_json_file(kHf + "qwen3_tiny/expected.json");
  if (expected_json["embed_std"] != f32_json["embed_std"])
    GTEST_SKIP() << name << " was drawn with another embed_std than qwen3_tiny";
  WeightStore f32 = WeightStore::open(kHf + "qwen3_tiny");
  WeightStore low = WeightStore::open(kHf + name);
  EXPECT_EQ(load_model_config(kHf + name).dtype, dtype);
  ASSERT_EQ(f32.names(), low.names());
  size_t checked = 0, nonzero = 0;
  for (const auto& n : f32.names()) {
    const TensorInfo& a = f32.get(n);
    const TensorInfo& b = low.get(n, a.shape);
    ASSERT_EQ(b.dtype, dtype) << n;
    const auto* src = static_cast<const float*>(a.data);
    const auto* bits = static_cast<const uint16_t*>(b.data);
    for (int64_t i = 0; i < a.shape.numel(); ++i) {
      const uint16_t want = dtype == DType::kBF16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
      ASSERT_EQ(bits[i], want) << n << "[" << i << "] = " << src[i];
      nonzero += src[i] != 0.0f;
      ++checked;
    }
  }
  EXPECT_GT(checked, 100000u);
  EXPECT_EQ(nonzero, checked);
}

TEST(HfFixtureWeights, Bf16CopyIsRoundedF32) {
  expect_rounded_copy("qwen3_tiny_bf16", DType::kBF16);
}
TEST(HfFixtureWeights, F16CopyIsRoundedF32) { expect_rounded_copy("qwen3_tiny_f16", DType::kF16); }

TEST(HfFixtureWeights, EveryFixtureConfigParses) {
  for (const char* name : {"qwen3_tiny", "qwen3_tiny_bf16", "qwen3_tiny_f16", "qwen3_yarn",
                           "qwen2_tiny", "llama_tiny"}) {
    ModelConfig c = load_model_config(kHf + name);
    WeightStore w = WeightStore::open(kHf + name);
    // Shapes implied by the parsed config match the file.
    w.get("model.embed_tokens.weight", Shape{c.vocab_size, c.hidden_size});
    w.get("model.layers.0.self_attn.q_proj.weight",
          Shape{int64_t{c.num_attention_heads} * c.head_dim, c.hidden_size});
    w.get("model.layers.0.self_attn.k_proj.weight",
          Shape{int64_t{c.num_key_value_heads} * c.head_dim, c.hidden_size});
    w.get("model.layers.0.mlp.down_proj.weight", Shape{c.hidden_size, c.intermediate_size});
    EXPECT_EQ(w.has("lm_head.weight"), !c.tie_word_embeddings) << name;
    EXPECT_EQ(w.has("model.layers.0.self_attn.q_norm.weight"), c.qk_norm) << name;
    EXPECT_EQ(w.has("model.layers.0.self_attn.q_proj.bias"), c.attention_bias) << name;
    EXPECT_TRUE(
        w.has("model.layers." + std::to_string(c.num_hidden_layers - 1) + ".mlp.up_proj.weight"));
    EXPECT_FALSE(
        w.has("model.layers." + std::to_string(c.num_hidden_layers) + ".mlp.up_proj.weight"));
  }
}

}  // namespace
}  // namespace kestrel
