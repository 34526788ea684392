#include "io/model_config.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "io/rope_config.h"

namespace kestrel {

namespace fs = std::filesystem;

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KS_CHECK(in.good(), "cannot open {}: {}", path, std::strerror(errno));
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw_error("{}: malformed JSON at byte {}: {}", path, e.byte, e.what());
  }
}

namespace {

// Defaults of transformers' config classes (Qwen3Config, Qwen2Config, LlamaConfig,
// MistralConfig) for the
// fields this engine reads, used when config.json leaves a field out.
struct ArchDefaults {
  const char* name;
  int vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads;
  // < 0: "null" in transformers, i.e. derived (kv heads = heads, head_dim = hidden / heads).
  int num_key_value_heads, head_dim;
  int max_position_embeddings;
  bool attention_bias;        // default of the attention_bias field
  bool attention_bias_fixed;  // Qwen2: q/k/v bias is always on, the field is not read
  bool qk_norm;
  std::optional<int> bos_token_id;
  std::optional<int> eos_token_id;
  // Mistral: "sliding_window" is the attention window (null: none), this when absent. Unset:
  // the architecture does not read the field (Qwen2/Qwen3 window only under
  // use_sliding_window, refused below).
  std::optional<int> sliding_window = std::nullopt;
};

constexpr int kDerived = -1;

const ArchDefaults kArchs[] = {
    {"Qwen3ForCausalLM", 151936, 4096, 22016, 32, 32, 32, 128, 32768, false, false, true, {}, {}},
    {"Qwen2ForCausalLM",
     151936,
     4096,
     22016,
     32,
     32,
     32,
     kDerived,
     32768,
     true,
     true,
     false,
     {},
     {}},
    {"LlamaForCausalLM", 32000, 4096, 11008, 32, 32, kDerived, kDerived, 2048, false, false, false,
     1, 2},
    {"MistralForCausalLM", 32000, 4096, 14336, 32, 32, 8, kDerived, 4096 * 32, false, false, false,
     1, 2, 4096},
};

std::string supported_architectures() {
  std::string s;
  for (const auto& a : kArchs) s += (s.empty() ? "" : ", ") + std::string(a.name);
  return s;
}

// An integer field, `fallback` when absent; an explicit null also gives `fallback`.
int get_int(const nlohmann::json& j, const char* key, int fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  const auto& v = j[key];
  KS_CHECK(v.is_number_integer(), "\"{}\" must be an integer, got {}", key, v.dump());
  int64_t x = v.get<int64_t>();
  KS_CHECK(x >= std::numeric_limits<int>::min() && x <= std::numeric_limits<int>::max(),
           "\"{}\" = {} is out of range", key, x);
  return static_cast<int>(x);
}

double get_double(const nlohmann::json& j, const char* key, double fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  const auto& v = j[key];
  KS_CHECK(v.is_number(), "\"{}\" must be a number, got {}", key, v.dump());
  return v.get<double>();
}

bool get_bool(const nlohmann::json& j, const char* key, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  const auto& v = j[key];
  KS_CHECK(v.is_boolean(), "\"{}\" must be true or false, got {}", key, v.dump());
  return v.get<bool>();
}

// eos_token_id: an int, a list of ints, or null.
std::vector<int> get_id_list(const nlohmann::json& j, const char* key) {
  std::vector<int> out;
  if (!j.contains(key) || j[key].is_null()) return out;
  const auto& v = j[key];
  if (v.is_number_integer()) return {v.get<int>()};
  KS_CHECK(v.is_array(), "\"{}\" must be an integer or a list of integers, got {}", key, v.dump());
  for (const auto& x : v) {
    KS_CHECK(x.is_number_integer(), "\"{}\" must be an integer or a list of integers, got {}", key,
             v.dump());
    out.push_back(x.get<int>());
  }
  return out;
}

DType parse_torch_dtype(const std::string& s) {
  if (s == "bfloat16") return DType::kBF16;
  if (s == "float16" || s == "half") return DType::kF16;
  if (s == "float32" || s == "float") return DType::kF32;
  throw_error("unsupported dtype '{}' (supported: bfloat16, float16, float32)", s);
}

}  // namespace

ModelConfig parse_model_config(const nlohmann::json& j) {
  KS_CHECK(j.is_object(), "config must be a JSON object");
  KS_CHECK(j.contains("architectures") && j["architectures"].is_array() &&
               !j["architectures"].empty() && j["architectures"][0].is_string(),
           "config has no \"architectures\" list (supported: {})", supported_architectures());
  const std::string arch = j["architectures"][0].get<std::string>();
  const ArchDefaults* d = nullptr;
  for (const auto& a : kArchs)
    if (arch == a.name) d = &a;
  KS_CHECK(d != nullptr, "unsupported architecture '{}' (supported: {})", arch,
           supported_architectures());

  ModelConfig c;
  c.architecture = arch;
  c.vocab_size = get_int(j, "vocab_size", d->vocab_size);
  c.hidden_size = get_int(j, "hidden_size", d->hidden_size);
  c.intermediate_size = get_int(j, "intermediate_size", d->intermediate_size);
  c.num_hidden_layers = get_int(j, "num_hidden_layers", d->num_hidden_layers);
  c.num_attention_heads = get_int(j, "num_attention_heads", d->num_attention_heads);
  // transformers: an absent field takes the class default, an explicit null means "= heads".
  if (j.contains("num_key_value_heads") && j["num_key_value_heads"].is_null())
    c.num_key_value_heads = c.num_attention_heads;
  else
    c.num_key_value_heads = get_int(j, "num_key_value_heads", d->num_key_value_heads);
  if (c.num_key_value_heads == kDerived) c.num_key_value_heads = c.num_attention_heads;
  c.max_position_embeddings = get_int(j, "max_position_embeddings", d->max_position_embeddings);
  c.rms_norm_eps = get_double(j, "rms_norm_eps", 1e-6);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", false);
  c.attention_bias = d->attention_bias_fixed ? d->attention_bias
                                             : get_bool(j, "attention_bias", d->attention_bias);
  c.qk_norm = d->qk_norm;

  KS_CHECK(c.num_attention_heads > 0, "\"num_attention_heads\" must be positive, got {}",
           c.num_attention_heads);
  int head_dim_default = d->head_dim;
  bool head_dim_derived = false;
  if (head_dim_default == kDerived || (j.contains("head_dim") && j["head_dim"].is_null())) {
    head_dim_default = c.hidden_size / c.num_attention_heads;
    head_dim_derived = !j.contains("head_dim") || j["head_dim"].is_null();
  }
  c.head_dim = get_int(j, "head_dim", head_dim_default);

  const auto positive = [](int v, const char* name) {
    KS_CHECK(v > 0, "\"{}\" must be positive, got {}", name, v);
  };
  positive(c.vocab_size, "vocab_size");
  positive(c.hidden_size, "hidden_size");
  positive(c.intermediate_size, "intermediate_size");
  positive(c.num_hidden_layers, "num_hidden_layers");
  positive(c.num_key_value_heads, "num_key_value_heads");
  positive(c.head_dim, "head_dim");
  positive(c.max_position_embeddings, "max_position_embeddings");
  KS_CHECK(c.rms_norm_eps > 0, "\"rms_norm_eps\" must be positive, got {}", c.rms_norm_eps);
  KS_CHECK(!head_dim_derived || c.hidden_size % c.num_attention_heads == 0,
           "\"hidden_size\" {} is not a multiple of \"num_attention_heads\" {}", c.hidden_size,
           c.num_attention_heads);
  KS_CHECK(c.num_attention_heads % c.num_key_value_heads == 0,
           "\"num_attention_heads\" {} is not a multiple of \"num_key_value_heads\" {}",
           c.num_attention_heads, c.num_key_value_heads);
  KS_CHECK(c.head_dim % 2 == 0, "\"head_dim\" must be even for rotary embeddings, got {}",
           c.head_dim);

  // Features of these architectures the engine does not implement: refuse rather than run
  // a different model.
  if (j.contains("hidden_act") && !j["hidden_act"].is_null()) {
    KS_CHECK(j["hidden_act"] == "silu", "unsupported hidden_act {} (supported: \"silu\")",
             j["hidden_act"].dump());
  }
  KS_CHECK(!get_bool(j, "mlp_bias", false), "\"mlp_bias\": true is not supported");
  KS_CHECK(!get_bool(j, "use_sliding_window", false),
           "\"use_sliding_window\": true is not supported (sliding-window attention)");
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    for (const auto& t : j["layer_types"])
      KS_CHECK(t == "full_attention", "layer type {} is not supported (only full_attention)",
               t.dump());
  }
  KS_CHECK(get_double(j, "partial_rotary_factor", 1.0) == 1.0,
           "\"partial_rotary_factor\" other than 1.0 is not supported");

  const char* dtype_key = j.contains("dtype") && !j["dtype"].is_null() ? "dtype" : "torch_dtype";
  if (j.contains(dtype_key) && !j[dtype_key].is_null()) {
    KS_CHECK(j[dtype_key].is_string(), "\"{}\" must be a string, got {}", dtype_key,
             j[dtype_key].dump());
    c.dtype = parse_torch_dtype(j[dtype_key].get<std::string>());
  }

  parse_rope(j, &c);

  if (d->sliding_window) {
    c.sliding_window =
        j.contains("sliding_window") ? get_int(j, "sliding_window", 0) : *d->sliding_window;
    KS_CHECK(c.sliding_window >= 0, "\"sliding_window\" must be >= 0 or null, got {}",
             c.sliding_window);
  }
  c.eos_token_ids = get_id_list(j, "eos_token_id");
  if (!j.contains("eos_token_id") && d->eos_token_id) c.eos_token_ids = {*d->eos_token_id};
  if (j.contains("bos_token_id")) {
    if (!j["bos_token_id"].is_null()) c.bos_token_id = get_int(j, "bos_token_id", 0);
  } else {
    c.bos_token_id = d->bos_token_id;
  }
  return c;
}

ModelConfig load_model_config(const std::string& model_dir) {
  const std::string path = (fs::path(model_dir) / "config.json").string();
  KS_CHECK(fs::exists(path), "no config.json in {}", model_dir);
  nlohmann::json j = read_json_file(path);
  try {
    return parse_model_config(j);
  } catch (const Error& e) {
    throw_error("{}: {}", path, e.what());
  }
}

GenerationDefaults load_generation_config(const std::string& model_dir) {
  GenerationDefaults g;
  const std::string path = (fs::path(model_dir) / "generation_config.json").string();
  if (!fs::exists(path)) return g;
  nlohmann::json j = read_json_file(path);
  try {
    KS_CHECK(j.is_object(), "must be a JSON object");
    auto opt_float = [&j](const char* key) -> std::optional<float> {
      if (!j.contains(key) || j[key].is_null()) return std::nullopt;
      return static_cast<float>(get_double(j, key, 0.0));
    };
    auto opt_int = [&j](const char* key) -> std::optional<int> {
      if (!j.contains(key) || j[key].is_null()) return std::nullopt;
      return get_int(j, key, 0);
    };
    g.temperature = opt_float("temperature");
    g.top_k = opt_int("top_k");
    g.top_p = opt_float("top_p");
    g.min_p = opt_float("min_p");
    g.repetition_penalty = opt_float("repetition_penalty");
    g.max_new_tokens = opt_int("max_new_tokens");
    g.eos_token_ids = get_id_list(j, "eos_token_id");
    g.bos_token_id = opt_int("bos_token_id");
    if (j.contains("do_sample") && !j["do_sample"].is_null())
      g.do_sample = get_bool(j, "do_sample", false);
  } catch (const Error& e) {
    throw_error("{}: {}", path, e.what());
  }
  return g;
}

}  // namespace kestrel
