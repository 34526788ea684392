// Loading errors and weight mapping, on copies of the HF fixture's qwen3_tiny / qwen2_tiny
// with tensors removed, reshaped or added.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "model/causal_lm.h"
#include "paged_runner.h"

namespace kestrel {
namespace {

namespace fs = std::filesystem;

fs::path fixture(const std::string& name) {
  return fs::path(KESTREL_SOURCE_DIR) / "tests" / "data" / "hf" / name;
}

// A scratch copy of a fixture model whose tensors pass through `edit` first.
class EditedModel {
 public:
  using Tensors = std::vector<std::pair<std::string, Tensor>>;
  EditedModel(const std::string& name, const std::function<void(Tensors&)>& edit) {
    dir_ = fs::path(KESTREL_BINARY_DIR) / "model_load_test" /
           (name + "_" + testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy_file(fixture(name) / "config.json", dir_ / "config.json");
    const WeightStore store = WeightStore::open(fixture(name).string());
    Tensors tensors;
    for (const std::string& n : store.names()) {
      const TensorInfo& info = store.get(n);
      Tensor copy = Tensor::host(info.dtype, info.shape);
      std::memcpy(copy.data(), info.data, info.nbytes);
      tensors.emplace_back(n, copy);
    }
    edit(tensors);
    write_safetensors((dir_ / "model.safetensors").string(), tensors);
  }
  ~EditedModel() { fs::remove_all(dir_); }
  std::string dir() const { return dir_.string(); }

 private:
  fs::path dir_;
};

std::string load_error(const std::string& dir) {
  CpuBackend be(1);
  try {
    CausalLM::load(dir, be);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelLoad, MissingTensorIsNamed) {
  EditedModel m("qwen3_tiny", [](EditedModel::Tensors& t) {
    std::erase_if(
        t, [](const auto& p) { return p.first == "model.layers.1.self_attn.k_norm.weight"; });
  });
  EXPECT_NE(load_error(m.dir()).find("model.layers.1.self_attn.k_norm.weight"), std::string::npos);
}

TEST(ModelLoad, WrongShapeIsNamed) {
  EditedModel m("qwen3_tiny", [](EditedModel::Tensors& t) {
    for (auto& [name, tensor] : t) {
      if (name == "model.layers.2.mlp.up_proj.weight") {
        tensor = Tensor::host(DType::kF32, {127, 64});  // intermediate is 128
      }
    }
  });
  const std::string err = load_error(m.dir());
  EXPECT_NE(err.find("model.layers.2.mlp.up_proj.weight"), std::string::npos) << err;
}

TEST(ModelLoad, UntiedModelNeedsLmHead) {
  EditedModel m("qwen2_tiny", [](EditedModel::Tensors& t) {
    std::erase_if(t, [](const auto& p) { return p.first == "lm_head.weight"; });
  });
  EXPECT_NE(load_error(m.dir()).find("lm_head.weight"), std::string::npos);
}

TEST(ModelLoad, TiedModelIgnoresStrayLmHead) {
  // transformers ties lm_head to embed_tokens even when the file has lm_head.weight; a
  // random lm_head here must not change the logits.
  EditedModel m("qwen3_tiny", [](EditedModel::Tensors& t) {
    Tensor junk = Tensor::host(DType::kF32, {512, 64});
    std::mt19937 rng(3);
    std::normal_distribution<float> n;
    for (int64_t i = 0; i < junk.numel(); ++i) junk.data_as<float>()[i] = n(rng);
    t.emplace_back("lm_head.weight", junk);
  });
  CpuBackend be(1);
  auto model = CausalLM::load(m.dir(), be);
  const nlohmann::json expected =
      read_json_file((fixture("qwen3_tiny") / "expected.json").string());
  const auto prompt = expected["prompts"][1].get<std::vector<int>>();
  test::PagedRunner runner(*model, be, 4, 16, 1);
  const auto rows = runner.step({{runner.add_sequence(), prompt}}, false);
  const auto want = expected["logits"][1].back().get<std::vector<double>>();
  double max_diff = 0;
  for (size_t i = 0; i < want.size(); ++i)
    max_diff = std::max(max_diff, std::abs(rows[0][i] - want[i]));
  EXPECT_LT(max_diff, 1e-3);
}

TEST(ModelLoad, WeightBytesCountEachTensorOnce) {
  // qwen3_tiny is tied and stores no lm_head: every stored tensor, as F32, once.
  const WeightStore store = WeightStore::open(fixture("qwen3_tiny").string());
  size_t want = 0;
  for (const std::string& n : store.names()) want += store.get(n).shape.numel() * sizeof(float);
  CpuBackend be(1);
  auto model = CausalLM::load(fixture("qwen3_tiny").string(), be);
  EXPECT_EQ(model->weight_bytes(), want);
  // bf16 on disk, F32 in backend memory: the same count.
  auto bf16 = CausalLM::load(fixture("qwen3_tiny_bf16").string(), be);
  EXPECT_EQ(bf16->weight_bytes(), want);
}

TEST(ModelLoad, KvCacheSpecFollowsConfig) {
  CpuBackend be(1);
  auto model = CausalLM::load(fixture("llama_tiny").string(), be);
  const KvCacheSpec s = model->kv_cache_spec(10, 16);
  EXPECT_EQ(s.num_layers, 2);
  EXPECT_EQ(s.num_kv_heads, 1);
  EXPECT_EQ(s.head_dim, 16);
  EXPECT_EQ(s.dtype, DType::kF32);
  EXPECT_EQ(s.bytes_per_block(), size_t(2) * 2 * 16 * 1 * 16 * 4);
  EXPECT_EQ(model->max_positions(), 128);
}

TEST(ModelLoad, ForwardRejectsWrongLayerCount) {
  CpuBackend be(1);
  auto model = CausalLM::load(fixture("qwen3_tiny").string(), be);
  auto kv = be.allocate_kv_cache(model->kv_cache_spec(4, 16));
  kv.pop_back();
  AttentionMetadata meta;
  meta.num_tokens = 1;
  Tensor ids = Tensor::host(DType::kI32, {1});
  Tensor rows = Tensor::host(DType::kI32, {1});
  EXPECT_THROW(model->forward(ids, meta, kv, rows), Error);
}

}  // namespace
}  // namespace kestrel
