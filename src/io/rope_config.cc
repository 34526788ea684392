#include "io/rope_config.h"

#include <optional>
#include <string>

#include "core/error.h"

namespace kestrel {
namespace {

constexpr const char* kRopeTypes[] = {"default", "linear", "dynamic", "yarn", "llama3"};

std::optional<double> opt_number(const nlohmann::json& p, const char* key, const char* where) {
  if (!p.contains(key) || p[key].is_null()) return std::nullopt;
  KS_CHECK(p[key].is_number(), "{}: \"{}\" must be a number, got {}", where, key, p[key].dump());
  return p[key].get<double>();
}

double required_number(const nlohmann::json& p, const char* key, const char* where,
                       const std::string& type) {
  auto v = opt_number(p, key, where);
  KS_CHECK(v.has_value(), "{}: rope type '{}' requires \"{}\"", where, type, key);
  return *v;
}

}  // namespace

void parse_rope(const nlohmann::json& j, ModelConfig* c) {
  c->rope_theta = 10000.0;  // transformers' default_theta for these architectures
  if (j.contains("rope_theta") && !j["rope_theta"].is_null()) {
    KS_CHECK(j["rope_theta"].is_number(), "\"rope_theta\" must be a number, got {}",
             j["rope_theta"].dump());
    c->rope_theta = j["rope_theta"].get<double>();
  }

  const nlohmann::json* p = nullptr;
  const char* where = nullptr;
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) {
    p = &j["rope_parameters"];
    where = "rope_parameters";
  } else if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    p = &j["rope_scaling"];
    where = "rope_scaling";
  }
  RopeScaling r;
  if (p != nullptr) {
    KS_CHECK(p->is_object(), "\"{}\" must be an object or null, got {}", where, p->dump());
    std::string type;
    for (const char* key : {"rope_type", "type"}) {
      if (p->contains(key) && !(*p)[key].is_null()) {
        KS_CHECK((*p)[key].is_string(), "{}: \"{}\" must be a string", where, key);
        type = (*p)[key].get<std::string>();
        break;
      }
    }
    if (type.empty()) {
      // A dict of dicts is transformers 5's per-layer-type form (sliding vs full layers).
      for (const auto& [key, value] : p->items())
        KS_CHECK(!value.is_object(), "{}: per-layer-type RoPE parameters ('{}') are not supported",
                 where, key);
      KS_CHECK(std::string(where) == "rope_parameters", "{}: no \"rope_type\" or \"type\"", where);
      type = "default";
    }
    bool known = false;
    for (const char* t : kRopeTypes) known = known || type == t;
    KS_CHECK(known,
             "unknown rope type '{}' in {} (supported: default, linear, dynamic, yarn, llama3)",
             type, where);
    r.type = type;
    if (auto theta = opt_number(*p, "rope_theta", where)) c->rope_theta = *theta;

    if (type != "default") {
      r.factor = required_number(*p, "factor", where, type);
      KS_CHECK(r.factor > 0, "{}: \"factor\" must be positive, got {}", where, r.factor);
    }
    if (p->contains("original_max_position_embeddings") &&
        !(*p)["original_max_position_embeddings"].is_null()) {
      const auto& v = (*p)["original_max_position_embeddings"];
      KS_CHECK(v.is_number_integer() && v.get<int64_t>() > 0,
               "{}: \"original_max_position_embeddings\" must be a positive integer, got {}", where,
               v.dump());
      r.original_max_position_embeddings = v.get<int>();
    }
    if (type == "llama3") {
      r.low_freq_factor = required_number(*p, "low_freq_factor", where, type);
      r.high_freq_factor = required_number(*p, "high_freq_factor", where, type);
      KS_CHECK(r.original_max_position_embeddings.has_value(),
               "{}: rope type 'llama3' requires \"original_max_position_embeddings\"", where);
      KS_CHECK(r.low_freq_factor > 0 && r.high_freq_factor > r.low_freq_factor,
               "{}: llama3 needs 0 < low_freq_factor < high_freq_factor, got {} and {}", where,
               r.low_freq_factor, r.high_freq_factor);
    }
    if (type == "yarn") {
      r.beta_fast = opt_number(*p, "beta_fast", where).value_or(32.0);
      r.beta_slow = opt_number(*p, "beta_slow", where).value_or(1.0);
      r.mscale = opt_number(*p, "mscale", where);
      r.mscale_all_dim = opt_number(*p, "mscale_all_dim", where);
      r.attention_factor = opt_number(*p, "attention_factor", where);
      if (p->contains("truncate") && !(*p)["truncate"].is_null()) {
        KS_CHECK((*p)["truncate"].is_boolean(), "{}: \"truncate\" must be true or false", where);
        r.truncate = (*p)["truncate"].get<bool>();
      }
    }
  }
  KS_CHECK(c->rope_theta > 0, "\"rope_theta\" must be positive, got {}", c->rope_theta);
  c->rope_scaling = r;
}

}  // namespace kestrel
