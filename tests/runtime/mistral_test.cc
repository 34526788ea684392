// MistralForCausalLM: Llama's decoder (transformers' MistralModel has the same layers, without
// biases) plus a sliding attention window, which the engine does not implement and so serves
// only up to. The model is the llama_tiny fixture (tests/data/hf) with its config.json saying
// Mistral; without a window HF's Llama greedy tokens are the oracle.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "cpu_config.h"
#include "kestrel/llm.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

const fs::path kLlama = fs::path(KESTREL_SOURCE_DIR) / "tests/data/hf/llama_tiny";

// A copy of llama_tiny whose config.json says MistralForCausalLM, `window` its sliding_window
// (null when negative). Removed with the object.
class MistralCopy {
 public:
  explicit MistralCopy(int window) : dir_(fs::temp_directory_path() / ("kestrel_mistral_" +
                                                                       std::to_string(getpid()))) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const char* f : {"model.safetensors", "generation_config.json"}) {
      fs::copy_file(kLlama / f, dir_ / f);
    }
    std::ifstream in(kLlama / "config.json");
    nlohmann::json c = nlohmann::json::parse(in);
    c["architectures"] = {"MistralForCausalLM"};
    c["model_type"] = "mistral";
    c.erase("attention_bias");  // not MistralConfig's fields
    c.erase("mlp_bias");
    c["sliding_window"] = window < 0 ? nlohmann::json(nullptr) : nlohmann::json(window);
    std::ofstream(dir_ / "config.json") << c.dump(2);
  }
  ~MistralCopy() { fs::remove_all(dir_); }
  std::string dir() const { return dir_.string(); }

 private:
  fs::path dir_;
};

EngineConfig cpu_config() { return test::cpu_config(64); }

TEST(Mistral, WithoutAWindowItIsLlamasDecoder) {
  std::ifstream in(kLlama / "expected.json");
  const nlohmann::json want = nlohmann::json::parse(in);
  const auto prompts = want["prompts"].get<std::vector<std::vector<int>>>();
  const auto greedy = want["greedy"].get<std::vector<std::vector<int>>>();
  MistralCopy model(-1);
  LLM llm(model.dir(), cpu_config());
  SamplingParams p;
  p.temperature = 0.0f;
  p.ignore_eos = true;
  p.max_tokens = static_cast<int>(greedy[0].size());
  const auto outs = llm.generate(prompts, p, false);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(outs[i].outputs.at(0).token_ids, greedy[i]) << "prompt " << i;
  }
}

TEST(Mistral, AWindowLimitsTheSequencesToIt) {
  MistralCopy model(40);
  LLM llm(model.dir(), cpu_config());
  EXPECT_EQ(llm.max_model_len(), 40);
  SamplingParams p;
  p.temperature = 0.0f;
  p.ignore_eos = true;
  p.max_tokens = 100;
  const auto outs = llm.generate({std::vector<int>(30, 7)}, p, false);
  EXPECT_EQ(outs[0].outputs.at(0).token_ids.size(), 10u) << "stops at the window";
  EXPECT_EQ(outs[0].outputs.at(0).finish_reason, "length");

  EngineConfig asked = cpu_config();
  asked.max_model_len = 64;
  try {
    LLM too_long(model.dir(), asked);
    FAIL() << "max_model_len past the sliding window was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sliding_window of 40 tokens"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kestrel
