// The random-model writer: a directory that the config parser and WeightStore accept, with
// HF's names and the shapes the spec asks for, deterministic non-zero weights.
#include "io/random_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "io/model_config.h"
#include "io/safetensors.h"
#include "io_test_util.h"

namespace kestrel {
namespace {

// Mean and standard deviation of a float tensor, computed here from the raw bytes.
std::pair<double, double> moments(const TensorInfo& t) {
  const int64_t n = t.shape.numel();
  std::vector<float> v(static_cast<size_t>(n));
  convert_to_f32(t.data, t.dtype, v.data(), v.size());
  double sum = 0, sq = 0;
  for (float x : v) sum += x;
  const double mean = sum / n;
  for (float x : v) sq += (x - mean) * (x - mean);
  return {mean, std::sqrt(sq / n)};
}

TEST(RandomModel, TinyPresetDirectory) {
  TempDir dir;
  TempDir tok;
  write_text(tok.path() + "/tokenizer.json", "{\"model\": {\"type\": \"BPE\"}}");
  write_text(tok.path() + "/tokenizer_config.json", "{\"eos_token\": \"<|im_end|>\"}");
  RandomModelSpec spec;  // "tiny"
  write_random_model(spec, dir.path(), tok.path());

  ModelConfig c = load_model_config(dir.path());
  EXPECT_EQ(c.architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 192);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.dtype, DType::kBF16);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1000000.0);
  EXPECT_EQ(c.rope_scaling.type, "default");
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{151645});
  EXPECT_EQ(c.bos_token_id, 151643);
  auto raw = read_json_file(dir.path() + "/config.json");
  EXPECT_EQ(raw["model_type"], "qwen3");
  EXPECT_TRUE(raw["rope_scaling"].is_null());
  EXPECT_EQ(raw["torch_dtype"], "bfloat16");

  GenerationDefaults g = load_generation_config(dir.path());
  EXPECT_EQ(g.eos_token_ids, (std::vector<int>{151645, 151643}));
  EXPECT_FLOAT_EQ(*g.temperature, 0.6f);
  EXPECT_EQ(*g.top_k, 20);
  EXPECT_FLOAT_EQ(*g.top_p, 0.95f);
  EXPECT_EQ(g.do_sample, true);

  WeightStore w = WeightStore::open(dir.path());
  EXPECT_EQ(w.names().size(), 1u + 2 * 11 + 1);  // embed, 11 per layer, final norm
  EXPECT_FALSE(w.has("lm_head.weight"));
  const TensorInfo& embed = w.get("model.embed_tokens.weight", Shape{151936, 64});
  EXPECT_EQ(embed.dtype, DType::kBF16);
  auto [em, es] = moments(embed);
  EXPECT_NEAR(em, 0.0, 1e-3);
  EXPECT_NEAR(es, 0.02, 0.002);
  w.get("model.layers.1.self_attn.q_proj.weight", Shape{128, 64});
  w.get("model.layers.1.self_attn.k_proj.weight", Shape{64, 64});
  w.get("model.layers.1.self_attn.v_proj.weight", Shape{64, 64});
  w.get("model.layers.1.self_attn.o_proj.weight", Shape{64, 128});
  w.get("model.layers.1.self_attn.k_norm.weight", Shape{32});
  w.get("model.layers.1.mlp.gate_proj.weight", Shape{192, 64});
  w.get("model.layers.1.mlp.up_proj.weight", Shape{192, 64});
  w.get("model.layers.1.mlp.down_proj.weight", Shape{64, 192});
  w.get("model.layers.0.post_attention_layernorm.weight", Shape{64});
  auto [nm, ns] = moments(w.get("model.layers.0.self_attn.q_norm.weight", Shape{32}));
  EXPECT_NEAR(nm, 1.0, 0.05);
  EXPECT_GT(ns, 0.01);
  auto [fm, fs] = moments(w.get("model.norm.weight", Shape{64}));
  EXPECT_NEAR(fm, 1.0, 0.05);
  EXPECT_GT(fs, 0.01);

  EXPECT_EQ(read_json_file(dir.path() + "/tokenizer.json")["model"]["type"], "BPE");
  EXPECT_EQ(read_json_file(dir.path() + "/tokenizer_config.json")["eos_token"], "<|im_end|>");
}

TEST(RandomModel, OverridesUntiedF32AndSmallVocab) {
  TempDir dir;
  RandomModelSpec spec;
  spec.vocab_size = 1000;
  spec.num_layers = 3;
  spec.num_heads = 8;
  spec.num_kv_heads = 1;
  spec.head_dim = 16;
  spec.tie_word_embeddings = false;
  spec.dtype = DType::kF32;
  write_random_model(spec, dir.path(), "");
  ModelConfig c = load_model_config(dir.path());
  EXPECT_EQ(c.num_hidden_layers, 3);
  EXPECT_EQ(c.num_key_value_heads, 1);
  EXPECT_EQ(c.dtype, DType::kF32);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{999});  // Qwen3's ids do not fit
  WeightStore w = WeightStore::open(dir.path());
  EXPECT_EQ(w.names().size(), 1u + 3 * 11 + 1 + 1);
  const TensorInfo& head = w.get("lm_head.weight", Shape{1000, 64});
  EXPECT_EQ(head.dtype, DType::kF32);
  w.get("model.layers.2.self_attn.q_proj.weight", Shape{128, 64});
  w.get("model.layers.2.self_attn.k_proj.weight", Shape{16, 64});
  // lm_head is drawn independently of the embedding.
  EXPECT_NE(std::memcmp(head.data, w.get("model.embed_tokens.weight").data, head.nbytes), 0);
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/tokenizer.json"));
}

TEST(RandomModel, DeterministicInSeed) {
  TempDir a, b, c;
  RandomModelSpec spec;
  spec.vocab_size = 5000;
  spec.seed = 7;
  write_random_model(spec, a.path(), "");
  write_random_model(spec, b.path(), "");
  spec.seed = 8;
  write_random_model(spec, c.path(), "");
  auto bytes = [](const std::string& d) {
    std::ifstream in(d + "/model.safetensors", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(bytes(a.path()), bytes(b.path()));
  EXPECT_NE(bytes(a.path()), bytes(c.path()));
  // Different tensors of one model get different draws.
  WeightStore w = WeightStore::open(a.path());
  EXPECT_NE(std::memcmp(w.get("model.layers.0.self_attn.k_proj.weight").data,
                        w.get("model.layers.0.self_attn.v_proj.weight").data, 64 * 64 * 2),
            0);
}

TEST(RandomModel, Errors) {
  TempDir dir;
  RandomModelSpec spec;
  spec.preset = "qwen3-72b";
  expect_error([&] { write_random_model(spec, dir.path(), ""); },
               {"unknown random model preset 'qwen3-72b'", "tiny", "qwen3-0.6b"});
  spec = RandomModelSpec{};
  spec.num_kv_heads = 3;
  expect_error([&] { resolve_random_model_spec(spec); }, {"num_heads 4", "num_kv_heads 3"});
  spec = RandomModelSpec{};
  spec.dtype = DType::kI32;
  expect_error([&] { resolve_random_model_spec(spec); }, {"dtype"});
  spec = RandomModelSpec{};
  expect_error([&] { write_random_model(spec, dir.path(), dir.path() + "/no_tokenizer"); },
               {"no tokenizer.json"});
  RandomModelSpec big;
  big.preset = "qwen3-0.6b";
  RandomModelSpec r = resolve_random_model_spec(big);
  EXPECT_EQ(r.num_layers, 28);
  EXPECT_EQ(r.hidden_size, 1024);
  EXPECT_EQ(r.intermediate_size, 3072);
  EXPECT_EQ(r.num_heads, 16);
  EXPECT_EQ(r.num_kv_heads, 8);
  EXPECT_EQ(r.head_dim, 128);
  EXPECT_EQ(*r.dtype, DType::kBF16);
}

// The tensor-parallel scaling presets carry the published Qwen3-8B and Qwen3-32B configs
// (Hugging Face config.json: hidden_size, intermediate_size, layers, heads, untied).
TEST(RandomModel, LargePresetsHaveTheRealShapes) {
  RandomModelSpec spec;
  spec.preset = "qwen3-8b";
  RandomModelSpec r = resolve_random_model_spec(spec);
  EXPECT_EQ(r.num_layers, 36);
  EXPECT_EQ(r.hidden_size, 4096);
  EXPECT_EQ(r.intermediate_size, 12288);
  EXPECT_EQ(r.num_heads, 32);
  EXPECT_EQ(r.num_kv_heads, 8);
  EXPECT_EQ(r.head_dim, 128);
  EXPECT_EQ(r.vocab_size, 151936);
  EXPECT_FALSE(*r.tie_word_embeddings);
  spec.preset = "qwen3-32b";
  r = resolve_random_model_spec(spec);
  EXPECT_EQ(r.num_layers, 64);
  EXPECT_EQ(r.hidden_size, 5120);
  EXPECT_EQ(r.intermediate_size, 25600);
  EXPECT_EQ(r.num_heads, 64);
  EXPECT_EQ(r.num_kv_heads, 8);
  EXPECT_FALSE(*r.tie_word_embeddings);
}

}  // namespace
}  // namespace kestrel
