#include "io/random_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "io/safetensors.h"

namespace kestrel {

namespace fs = std::filesystem;

namespace {

// Qwen3's special token ids (<|endoftext|>, <|im_end|>).
constexpr int kQwenEndOfText = 151643;
constexpr int kQwenImEnd = 151645;
// Elements per independently seeded chunk: the unit of parallel work and of determinism.
constexpr int64_t kChunk = 1 << 16;

RandomModelSpec preset(const std::string& name) {
  RandomModelSpec s;
  s.preset = name;
  s.vocab_size = 151936;
  s.max_position_embeddings = 40960;
  s.rope_theta = 1000000.0;
  s.rms_norm_eps = 1e-6;
  s.tie_word_embeddings = true;
  s.dtype = DType::kBF16;
  if (name == "tiny") {
    s.hidden_size = 64;
    s.intermediate_size = 192;
    s.num_layers = 2;
    s.num_heads = 4;
    s.num_kv_heads = 2;
    s.head_dim = 32;
  } else if (name == "qwen3-0.6b") {
    s.hidden_size = 1024;
    s.intermediate_size = 3072;
    s.num_layers = 28;
    s.num_heads = 16;
    s.num_kv_heads = 8;
    s.head_dim = 128;
  } else if (name == "qwen3-8b") {  // tensor-parallel scaling (docs/parallel.md)
    s.hidden_size = 4096;
    s.intermediate_size = 12288;
    s.num_layers = 36;
    s.num_heads = 32;
    s.num_kv_heads = 8;
    s.head_dim = 128;
    s.tie_word_embeddings = false;
  } else if (name == "qwen3-32b") {
    s.hidden_size = 5120;
    s.intermediate_size = 25600;
    s.num_layers = 64;
    s.num_heads = 64;
    s.num_kv_heads = 8;
    s.head_dim = 128;
    s.tie_word_embeddings = false;
  } else {
    throw_error("unknown random model preset '{}' (known: tiny, qwen3-0.6b, qwen3-8b, qwen3-32b)",
                name);
  }
  return s;
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Approximately standard normal from one 64-bit draw: the sum of four 16-bit uniforms
// (Irwin-Hall, variance 4/12) recentred and rescaled. Cheap, and shape does not matter here.
inline float normalish(uint64_t r) {
  constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(3) / 2^16
  float sum =
      static_cast<float>((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48));
  return (sum - 2.0f * 65535.0f) * kScale;
}

struct WeightSpec {
  SafetensorsEntry tensor;
  float mean;
  float stddev;
};

std::vector<WeightSpec> weight_specs(const RandomModelSpec& s) {
  const DType t = *s.dtype;
  const int64_t h = s.hidden_size, q = int64_t{s.num_heads} * s.head_dim,
                kv = int64_t{s.num_kv_heads} * s.head_dim, inter = s.intermediate_size;
  constexpr float kMatrixStd = 0.02f, kNormStd = 0.05f;
  std::vector<WeightSpec> w;
  auto matrix = [&](std::string name, int64_t rows, int64_t cols) {
    w.push_back({{std::move(name), t, Shape{rows, cols}}, 0.0f, kMatrixStd});
  };
  auto norm = [&](std::string name, int64_t n) {
    w.push_back({{std::move(name), t, Shape{n}}, 1.0f, kNormStd});
  };
  matrix("model.embed_tokens.weight", s.vocab_size, h);
  for (int i = 0; i < s.num_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    norm(p + "input_layernorm.weight", h);
    matrix(p + "self_attn.q_proj.weight", q, h);
    matrix(p + "self_attn.k_proj.weight", kv, h);
    matrix(p + "self_attn.v_proj.weight", kv, h);
    matrix(p + "self_attn.o_proj.weight", h, q);
    norm(p + "self_attn.q_norm.weight", s.head_dim);
    norm(p + "self_attn.k_norm.weight", s.head_dim);
    norm(p + "post_attention_layernorm.weight", h);
    matrix(p + "mlp.gate_proj.weight", inter, h);
    matrix(p + "mlp.up_proj.weight", inter, h);
    matrix(p + "mlp.down_proj.weight", h, inter);
  }
  norm("model.norm.weight", h);
  if (!*s.tie_word_embeddings) matrix("lm_head.weight", s.vocab_size, h);
  return w;
}

// Fills `out` (numel elements of dtype) for tensor number `index`. Each chunk has its own
// generator seeded from (seed, index, chunk), so the bytes do not depend on the threads.
void fill_random(const WeightSpec& w, uint64_t seed, uint64_t index, void* out) {
  const int64_t n = w.tensor.shape.numel();
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const DType dtype = w.tensor.dtype;
  // Threads only pay off for large tensors; small ones would mostly wait at the barrier.
#pragma omp parallel for schedule(static) if (chunks >= 16)
  for (int64_t c = 0; c < chunks; ++c) {
    uint64_t state = seed;
    state = splitmix64(state) ^ index;
    state = splitmix64(state) ^ static_cast<uint64_t>(c);
    const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
    float buf[256];
    for (int64_t i = begin; i < end; i += 256) {
      const int64_t m = std::min<int64_t>(256, end - i);
      for (int64_t k = 0; k < m; ++k) buf[k] = w.mean + w.stddev * normalish(splitmix64(state));
      void* dst = static_cast<char*>(out) + i * dtype_size(dtype);
      convert_from_f32(buf, dst, dtype, static_cast<size_t>(m));
    }
  }
}

void write_json(const fs::path& path, const nlohmann::json& j) {
  std::ofstream out(path, std::ios::trunc);
  KS_CHECK(out.good(), "cannot create {}: {}", path.string(), std::strerror(errno));
  out << j.dump(2) << "\n";
  KS_CHECK(out.good(), "error writing {}", path.string());
}

std::string torch_dtype_name(DType t) {
  switch (t) {
    case DType::kBF16:
      return "bfloat16";
    case DType::kF16:
      return "float16";
    default:
      return "float32";
  }
}

double tensor_bytes(const WeightSpec& w) {
  return static_cast<double>(w.tensor.shape.numel()) * static_cast<double>(dtype_size(w.tensor.dtype));
}

// Before anything is written: the weights fit on the disk (an absurd --layers filled it at
// gigabytes a second), and the largest tensor, made whole in memory, fits in memory.
void check_weights_fit(const std::vector<WeightSpec>& weights, const fs::path& dir) {
  double total = 0, largest = 0;
  for (const WeightSpec& w : weights) {
    total += tensor_bytes(w);
    largest = std::max(largest, tensor_bytes(w));
  }
  constexpr double kGiB = 1 << 30;
  std::error_code ec;
  const fs::space_info space = fs::space(dir, ec);
  KS_CHECK(ec || total <= static_cast<double>(space.available),
           "random model: the weights need {:.1f} GiB but {} has {:.1f} GiB free", total / kGiB,
           dir.string(), static_cast<double>(space.available) / kGiB);
  KS_CHECK(largest <= host_memory_bytes(),
           "random model: its largest tensor needs {:.1f} GiB, more than this machine's {:.1f} "
           "GiB of memory",
           largest / kGiB, host_memory_bytes() / kGiB);
}

}  // namespace

RandomModelSpec resolve_random_model_spec(const RandomModelSpec& spec) {
  RandomModelSpec s = preset(spec.preset);
  auto take = [](auto& dst, const auto& src) {
    if (src != 0) dst = src;
  };
  take(s.vocab_size, spec.vocab_size);
  take(s.hidden_size, spec.hidden_size);
  take(s.intermediate_size, spec.intermediate_size);
  take(s.num_layers, spec.num_layers);
  take(s.num_heads, spec.num_heads);
  take(s.num_kv_heads, spec.num_kv_heads);
  take(s.head_dim, spec.head_dim);
  take(s.max_position_embeddings, spec.max_position_embeddings);
  take(s.rope_theta, spec.rope_theta);
  take(s.rms_norm_eps, spec.rms_norm_eps);
  if (spec.tie_word_embeddings) s.tie_word_embeddings = spec.tie_word_embeddings;
  if (spec.dtype) s.dtype = spec.dtype;
  s.seed = spec.seed;

  for (auto [v, name] : {std::pair{s.vocab_size, "vocab_size"},
                         {s.hidden_size, "hidden_size"},
                         {s.intermediate_size, "intermediate_size"},
                         {s.num_layers, "num_layers"},
                         {s.num_heads, "num_heads"},
                         {s.num_kv_heads, "num_kv_heads"},
                         {s.head_dim, "head_dim"},
                         {s.max_position_embeddings, "max_position_embeddings"}})
    KS_CHECK(v > 0, "random model: {} must be positive, got {}", name, v);
  KS_CHECK(s.num_heads % s.num_kv_heads == 0,
           "random model: num_heads {} is not a multiple of num_kv_heads {}", s.num_heads,
           s.num_kv_heads);
  KS_CHECK(s.head_dim % 2 == 0, "random model: head_dim must be even, got {}", s.head_dim);
  KS_CHECK(s.rope_theta > 0 && s.rms_norm_eps > 0,
           "random model: rope_theta and rms_norm_eps must be positive");
  const DType t = *s.dtype;
  KS_CHECK(t == DType::kBF16 || t == DType::kF16 || t == DType::kF32,
           "random model: dtype must be BF16, F16 or F32, got {}", dtype_name(t));
  return s;
}

void write_random_model(const RandomModelSpec& spec, const std::string& out_dir,
                        const std::string& tokenizer_dir) {
  const RandomModelSpec s = resolve_random_model_spec(spec);
  KS_CHECK(tokenizer_dir.empty() || fs::exists(fs::path(tokenizer_dir) / "tokenizer.json"),
           "tokenizer directory {} has no tokenizer.json", tokenizer_dir);
  const fs::path dir(out_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  KS_CHECK(!ec, "cannot create {}: {}", out_dir, ec.message());
  const std::vector<WeightSpec> weights = weight_specs(s);
  check_weights_fit(weights, dir);

  // Qwen3's ids when the vocabulary holds them; else the last id stands in for all.
  const bool qwen_ids = s.vocab_size > kQwenImEnd;
  const int bos = qwen_ids ? kQwenEndOfText : s.vocab_size - 1;
  const int eos = qwen_ids ? kQwenImEnd : s.vocab_size - 1;

  // Exactly the keys and spelling of Qwen3-0.6B's config.json (transformers 4.51).
  nlohmann::json config = {{"architectures", {"Qwen3ForCausalLM"}},
                           {"attention_bias", false},
                           {"attention_dropout", 0.0},
                           {"bos_token_id", bos},
                           {"eos_token_id", eos},
                           {"head_dim", s.head_dim},
                           {"hidden_act", "silu"},
                           {"hidden_size", s.hidden_size},
                           {"initializer_range", 0.02},
                           {"intermediate_size", s.intermediate_size},
                           {"max_position_embeddings", s.max_position_embeddings},
                           {"max_window_layers", s.num_layers},
                           {"model_type", "qwen3"},
                           {"num_attention_heads", s.num_heads},
                           {"num_hidden_layers", s.num_layers},
                           {"num_key_value_heads", s.num_kv_heads},
                           {"rms_norm_eps", s.rms_norm_eps},
                           {"rope_scaling", nullptr},
                           {"rope_theta", s.rope_theta},
                           {"sliding_window", nullptr},
                           {"tie_word_embeddings", *s.tie_word_embeddings},
                           {"torch_dtype", torch_dtype_name(*s.dtype)},
                           {"transformers_version", "4.51.0"},
                           {"use_cache", true},
                           {"use_sliding_window", false},
                           {"vocab_size", s.vocab_size}};
  write_json(dir / "config.json", config);

  nlohmann::json gen = {
      {"bos_token_id", bos},
      {"do_sample", true},
      {"eos_token_id", qwen_ids ? nlohmann::json{kQwenImEnd, kQwenEndOfText} : nlohmann::json{eos}},
      {"pad_token_id", bos},
      {"temperature", 0.6},
      {"top_k", 20},
      {"top_p", 0.95},
      {"transformers_version", "4.51.0"}};
  write_json(dir / "generation_config.json", gen);

  std::vector<SafetensorsEntry> specs;
  size_t largest = 0;
  for (const auto& w : weights) {
    specs.push_back(w.tensor);
    largest =
        std::max(largest, static_cast<size_t>(w.tensor.shape.numel()) * dtype_size(w.tensor.dtype));
  }
  const fs::path weights_path = dir / "model.safetensors";
  std::ofstream out(weights_path, std::ios::binary | std::ios::trunc);
  KS_CHECK(out.good(), "cannot create {}: {}", weights_path.string(), std::strerror(errno));
  const std::string header = safetensors_header(specs, {{"format", "pt"}});
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  // One buffer the size of the largest tensor, reused: memory stays at one tensor.
  std::vector<char> buf(largest);
  for (size_t i = 0; i < weights.size(); ++i) {
    const size_t nbytes =
        static_cast<size_t>(weights[i].tensor.shape.numel()) * dtype_size(weights[i].tensor.dtype);
    fill_random(weights[i], s.seed, i, buf.data());
    out.write(buf.data(), static_cast<std::streamsize>(nbytes));
  }
  out.flush();
  KS_CHECK(out.good(), "error writing {}", weights_path.string());

  if (!tokenizer_dir.empty()) {
    for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
      const fs::path src = fs::path(tokenizer_dir) / name;
      if (!fs::exists(src)) continue;
      fs::copy_file(src, dir / name, fs::copy_options::overwrite_existing, ec);
      KS_CHECK(!ec, "cannot copy {}: {}", src.string(), ec.message());
    }
  }
}

}  // namespace kestrel
