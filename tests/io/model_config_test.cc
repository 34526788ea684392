// config.json parsing: the HF-written fixture configs, transformers' defaults, both RoPE
// forms, and every rejected input with the message it must carry.
#include "io/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io_test_util.h"

namespace kestrel {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

const std::string kHf = std::string(KESTREL_SOURCE_DIR) + "/tests/data/hf/";

json minimal(const std::string& arch) {
  return json{{"architectures", {arch}}, {"vocab_size", 100},      {"hidden_size", 64},
              {"intermediate_size", 96}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}};
}

// Values below are read off the config.json files that transformers wrote (tools/
// make_hf_fixture.py), i.e. what HF itself uses for these models.
TEST(ModelConfigFixture, Qwen3Tiny) {
  ModelConfig c = load_model_config(kHf + "qwen3_tiny");
  EXPECT_EQ(c.architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 128);
  EXPECT_EQ(c.num_hidden_layers, 3);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 32);  // not hidden / heads = 16
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_scaling.type, "default");
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.max_position_embeddings, 256);
  EXPECT_EQ(c.dtype, DType::kF32);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{2});
  EXPECT_FALSE(c.bos_token_id.has_value());  // "bos_token_id": null
}

TEST(ModelConfigFixture, DtypeVariants) {
  EXPECT_EQ(load_model_config(kHf + "qwen3_tiny_bf16").dtype, DType::kBF16);
  EXPECT_EQ(load_model_config(kHf + "qwen3_tiny_f16").dtype, DType::kF16);
}

TEST(ModelConfigFixture, Qwen3Yarn) {
  ModelConfig c = load_model_config(kHf + "qwen3_yarn");
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 4.0);
  ASSERT_TRUE(c.rope_scaling.original_max_position_embeddings.has_value());
  EXPECT_EQ(*c.rope_scaling.original_max_position_embeddings, 32);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_slow, 1.0);
  EXPECT_FALSE(c.rope_scaling.attention_factor.has_value());
  EXPECT_EQ(c.max_position_embeddings, 128);
}

TEST(ModelConfigFixture, Qwen2Tiny) {
  ModelConfig c = load_model_config(kHf + "qwen2_tiny");
  EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(c.attention_bias);  // Qwen2 always has q/k/v bias; its config has no field
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.head_dim, 16);  // no head_dim in the file: hidden / heads
  EXPECT_DOUBLE_EQ(c.rope_theta, 1000000.0);
  EXPECT_EQ(c.bos_token_id, 1);
}

TEST(ModelConfigFixture, LlamaTiny) {
  ModelConfig c = load_model_config(kHf + "llama_tiny");
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.num_key_value_heads, 1);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 32);
  EXPECT_EQ(c.max_position_embeddings, 128);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{2, 3}));
}

TEST(ModelConfigFixture, GenerationConfig) {
  GenerationDefaults g = load_generation_config(kHf + "llama_tiny");
  EXPECT_EQ(g.eos_token_ids, (std::vector<int>{2, 3}));
  EXPECT_EQ(g.bos_token_id, 1);
  EXPECT_FALSE(g.temperature.has_value());
}

// Defaults of transformers 5's config classes when a field is absent.
TEST(ModelConfigDefaults, PerArchitecture) {
  json q3j = minimal("Qwen3ForCausalLM");
  q3j["num_attention_heads"] = 64;  // a multiple of the default 32 KV heads
  ModelConfig q3 = parse_model_config(q3j);
  EXPECT_EQ(q3.head_dim, 128);            // Qwen3Config.head_dim = 128
  EXPECT_EQ(q3.num_key_value_heads, 32);  // Qwen3Config.num_key_value_heads = 32
  EXPECT_EQ(q3.max_position_embeddings, 32768);
  EXPECT_FALSE(q3.attention_bias);
  EXPECT_FALSE(q3.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(q3.rope_theta, 10000.0);
  EXPECT_EQ(q3.rope_scaling.type, "default");
  EXPECT_TRUE(q3.eos_token_ids.empty());

  json j = minimal("LlamaForCausalLM");
  ModelConfig ll = parse_model_config(j);
  EXPECT_EQ(ll.num_key_value_heads, 4);  // None -> num_attention_heads
  EXPECT_EQ(ll.head_dim, 16);            // None -> hidden / heads
  EXPECT_EQ(ll.max_position_embeddings, 2048);
  EXPECT_EQ(ll.bos_token_id, 1);
  EXPECT_EQ(ll.eos_token_ids, std::vector<int>{2});

  j = minimal("Qwen3ForCausalLM");
  j["num_key_value_heads"] = nullptr;  // explicit null: = num_attention_heads
  j["num_attention_heads"] = 8;
  EXPECT_EQ(parse_model_config(j).num_key_value_heads, 8);

  j = minimal("Qwen3ForCausalLM");
  j["attention_bias"] = true;
  j["num_key_value_heads"] = 2;
  EXPECT_TRUE(parse_model_config(j).attention_bias);
  j["torch_dtype"] = "bfloat16";  // transformers 4 spelling
  EXPECT_EQ(parse_model_config(j).dtype, DType::kBF16);
  j["dtype"] = "float16";  // transformers 5 spelling wins
  EXPECT_EQ(parse_model_config(j).dtype, DType::kF16);
}

// MistralConfig's defaults, and its sliding_window: absent means transformers' 4096, null
// none; Qwen's field is not a window unless use_sliding_window (refused), so it is not read.
TEST(ModelConfigDefaults, MistralAndItsSlidingWindow) {
  json j = minimal("MistralForCausalLM");
  j["num_attention_heads"] = 8;
  ModelConfig m = parse_model_config(j);
  EXPECT_EQ(m.num_key_value_heads, 8);  // MistralConfig.num_key_value_heads = 8
  EXPECT_EQ(m.max_position_embeddings, 131072);
  EXPECT_EQ(m.sliding_window, 4096);
  EXPECT_EQ(m.bos_token_id, 1);
  EXPECT_EQ(m.eos_token_ids, std::vector<int>{2});
  EXPECT_FALSE(m.qk_norm);
  j["sliding_window"] = nullptr;
  EXPECT_EQ(parse_model_config(j).sliding_window, 0);
  j["sliding_window"] = 32;
  EXPECT_EQ(parse_model_config(j).sliding_window, 32);
  j["sliding_window"] = -1;
  EXPECT_THROW(parse_model_config(j), Error);

  json q = minimal("Qwen2ForCausalLM");
  q["num_key_value_heads"] = 2;
  q["sliding_window"] = 4096;
  q["use_sliding_window"] = false;
  EXPECT_EQ(parse_model_config(q).sliding_window, 0);
}

TEST(ModelConfigRope, Transformers4Form) {
  json j = minimal("LlamaForCausalLM");
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = nullptr;
  ModelConfig c = parse_model_config(j);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, "default");

  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.5}};  // legacy key "type"
  c = parse_model_config(j);
  EXPECT_EQ(c.rope_scaling.type, "linear");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 2.5);

  j["rope_scaling"] = {
      {"rope_type", "yarn"}, {"factor", 4.0},           {"original_max_position_embeddings", 32768},
      {"beta_fast", 16},     {"attention_factor", 1.5}, {"truncate", false}};
  c = parse_model_config(j);
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 32768);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 16.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_slow, 1.0);
  EXPECT_EQ(c.rope_scaling.attention_factor, 1.5);
  EXPECT_FALSE(c.rope_scaling.truncate);

  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  EXPECT_EQ(parse_model_config(j).rope_scaling.type, "dynamic");
}

TEST(ModelConfigRope, Transformers5Form) {
  json j = minimal("Qwen3ForCausalLM");
  j["num_key_value_heads"] = 2;
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  ModelConfig c = parse_model_config(j);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1000000.0);
  EXPECT_EQ(c.rope_scaling.type, "default");
  // rope_parameters wins over a stale rope_scaling.
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  EXPECT_EQ(parse_model_config(j).rope_scaling.type, "default");
}

TEST(ModelConfigErrors, UnsupportedArchitecture) {
  expect_error(
      [] { parse_model_config(minimal("GemmaForCausalLM")); },
      {"unsupported architecture 'GemmaForCausalLM'", "Qwen3ForCausalLM", "LlamaForCausalLM",
       "MistralForCausalLM"});
  json j = minimal("Qwen3ForCausalLM");
  j.erase("architectures");
  expect_error([&] { parse_model_config(j); }, {"architectures"});
}

TEST(ModelConfigErrors, UnknownRopeType) {
  json j = minimal("LlamaForCausalLM");
  j["rope_scaling"] = {{"rope_type", "mrope"}, {"factor", 2.0}};
  expect_error([&] { parse_model_config(j); }, {"unknown rope type 'mrope'", "rope_scaling"});
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "longrope"}, {"rope_theta", 10000.0}};
  expect_error([&] { parse_model_config(j); }, {"unknown rope type 'longrope'"});
  j["rope_parameters"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  expect_error([&] { parse_model_config(j); }, {"llama3", "low_freq_factor"});
  j["rope_parameters"] = {{"rope_type", "linear"}};
  expect_error([&] { parse_model_config(j); }, {"'linear' requires \"factor\""});
}

TEST(ModelConfigErrors, InconsistentSizes) {
  json j = minimal("LlamaForCausalLM");
  j["num_key_value_heads"] = 3;
  expect_error([&] { parse_model_config(j); },
               {"\"num_attention_heads\" 4 is not a multiple of \"num_key_value_heads\" 3"});
  j = minimal("LlamaForCausalLM");
  j["hidden_size"] = 66;  // head_dim derived from hidden / heads
  expect_error([&] { parse_model_config(j); }, {"\"hidden_size\" 66", "\"num_attention_heads\" 4"});
  j = minimal("LlamaForCausalLM");
  j["vocab_size"] = 0;
  expect_error([&] { parse_model_config(j); }, {"\"vocab_size\" must be positive"});
  j = minimal("LlamaForCausalLM");
  j["hidden_size"] = "64";
  expect_error([&] { parse_model_config(j); }, {"\"hidden_size\" must be an integer"});
  j = minimal("LlamaForCausalLM");
  j["torch_dtype"] = "float8";
  expect_error([&] { parse_model_config(j); }, {"unsupported dtype 'float8'"});
  j = minimal("Qwen2ForCausalLM");
  j["num_key_value_heads"] = 4;
  j["use_sliding_window"] = true;
  expect_error([&] { parse_model_config(j); }, {"use_sliding_window"});
}

TEST(ModelConfigErrors, Files) {
  TempDir dir;
  expect_error([&] { load_model_config(dir.path()); }, {"no config.json in", dir.path()});
  write_text(dir.path() + "/config.json", "{\"architectures\": [\"Qwen3ForCausalLM\"],\n  oops}");
  expect_error([&] { load_model_config(dir.path()); },
               {dir.path() + "/config.json", "malformed JSON at byte"});
  expect_error([&] { read_json_file(dir.path() + "/absent.json"); },
               {"cannot open", "absent.json"});
  // Errors from parsing name the file too.
  write_text(dir.path() + "/config.json", minimal("GPT2LMHeadModel").dump());
  expect_error([&] { load_model_config(dir.path()); },
               {dir.path() + "/config.json", "unsupported architecture 'GPT2LMHeadModel'"});
}

TEST(GenerationConfig, AbsentMalformedAndQwen3Values) {
  TempDir dir;
  GenerationDefaults none = load_generation_config(dir.path());
  EXPECT_FALSE(none.temperature.has_value());
  EXPECT_TRUE(none.eos_token_ids.empty());
  write_text(dir.path() + "/generation_config.json", "{\"temperature\": 0.6,");
  expect_error([&] { load_generation_config(dir.path()); },
               {"generation_config.json", "malformed JSON"});
  // Qwen3-0.6B's generation_config.json.
  write_text(dir.path() + "/generation_config.json",
             R"({"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643],
                 "pad_token_id": 151643, "temperature": 0.6, "top_k": 20, "top_p": 0.95,
                 "transformers_version": "4.51.0"})");
  GenerationDefaults g = load_generation_config(dir.path());
  EXPECT_FLOAT_EQ(*g.temperature, 0.6f);
  EXPECT_EQ(*g.top_k, 20);
  EXPECT_FLOAT_EQ(*g.top_p, 0.95f);
  EXPECT_FALSE(g.min_p.has_value());
  EXPECT_EQ(g.eos_token_ids, (std::vector<int>{151645, 151643}));
  EXPECT_EQ(g.bos_token_id, 151643);
  EXPECT_EQ(g.do_sample, true);
}

}  // namespace
}  // namespace kestrel
