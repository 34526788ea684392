#include "server/structured_request.h"

#include <optional>
#include <string>
#include <utility>

#include "server/api_error.h"
#include "server/request_fields.h"
#include "structured/grammar_compiler.h"

namespace kestrel::server {
namespace {

using structured::StructuredOutputSpec;
using Kind = StructuredOutputSpec::Kind;

// A JSON schema given as an object, a boolean, or (vLLM) a string holding one.
nlohmann::ordered_json read_schema(const nlohmann::ordered_json& v, const std::string& param) {
  if (v.is_object() || v.is_boolean()) return v;
  if (v.is_string()) {
    try {
      return nlohmann::ordered_json::parse(v.get<std::string>());
    } catch (const nlohmann::json::exception&) {
      throw_bad_request(param, "'{}' is a string that is not a JSON schema", param);
    }
  }
  throw_bad_request(param, "'{}' must be a JSON schema (an object), got {}", param, json_type_name(v));
}

std::vector<std::string> read_choices(const nlohmann::ordered_json& v, const std::string& param) {
  if (!v.is_array() || v.empty()) throw_bad_request(param, "'{}' must be a non-empty list of strings", param);
  std::vector<std::string> out;
  for (const auto& c : v) {
    if (!c.is_string()) throw_bad_request(param, "'{}' must be a non-empty list of strings", param);
    out.push_back(c.get<std::string>());
  }
  return out;
}

std::optional<StructuredOutputSpec> from_response_format(const FieldReader& f) {
  const nlohmann::ordered_json* v = f.find("response_format");
  if (v == nullptr) return std::nullopt;
  FieldReader rf(*v, "'response_format'", "response_format.");
  rf.reject_unknown({"type", "json_schema"});
  const std::string type = rf.string("type").value_or("");
  if (type == "text") return std::nullopt;
  StructuredOutputSpec spec;
  if (type == "json_object") {
    spec.kind = Kind::kJsonObject;
    return spec;
  }
  if (type != "json_schema") {
    throw_bad_request("response_format.type",
                      "'response_format.type' must be 'text', 'json_object' or 'json_schema', got '{}'", type);
  }
  const nlohmann::ordered_json* js = rf.find("json_schema");
  if (js == nullptr) {
    throw_bad_request("response_format.json_schema", "'response_format.json_schema' is required for type 'json_schema'");
  }
  FieldReader jf(*js, "'response_format.json_schema'", "response_format.json_schema.");
  jf.reject_unknown({"name", "description", "schema", "strict"});
  (void)jf.string("name");
  (void)jf.string("description");
  (void)jf.boolean("strict");  // the output always follows the schema
  const nlohmann::ordered_json* schema = jf.find("schema");
  if (schema == nullptr) {
    throw_bad_request("response_format.json_schema.schema", "'response_format.json_schema.schema' is required");
  }
  spec.kind = Kind::kJsonSchema;
  spec.schema = read_schema(*schema, "response_format.json_schema.schema");
  return spec;
}

// vLLM's fields: guided_* at the top level, or the structured_outputs object.
std::vector<std::pair<std::string, StructuredOutputSpec>> from_vllm_fields(const FieldReader& f) {
  std::vector<std::pair<std::string, StructuredOutputSpec>> out;
  auto add = [&](const FieldReader& r, const char* json, const char* regex, const char* choice) {
    if (const auto* v = r.find(json)) {
      StructuredOutputSpec s;
      s.kind = Kind::kJsonSchema;
      s.schema = read_schema(*v, r.name(json));
      out.emplace_back(r.name(json), std::move(s));
    }
    if (const auto* v = r.find(regex)) {
      if (!v->is_string()) throw_bad_request(r.name(regex), "'{}' must be a string", r.name(regex));
      StructuredOutputSpec s;
      s.kind = Kind::kRegex;
      s.regex = v->get<std::string>();
      out.emplace_back(r.name(regex), std::move(s));
    }
    if (const auto* v = r.find(choice)) {
      StructuredOutputSpec s;
      s.kind = Kind::kChoice;
      s.choices = read_choices(*v, r.name(choice));
      out.emplace_back(r.name(choice), std::move(s));
    }
  };
  add(f, "guided_json", "guided_regex", "guided_choice");
  if (f.find("guided_grammar")) throw_bad_request("guided_grammar", "'guided_grammar' (EBNF grammars) is not supported");
  (void)f.string("guided_decoding_backend");  // one backend here: any name selects it
  if (f.find("guided_whitespace_pattern")) {
    throw_bad_request("guided_whitespace_pattern", "'guided_whitespace_pattern' is not supported");
  }
  if (const auto* so = f.find("structured_outputs")) {
    FieldReader sf(*so, "'structured_outputs'", "structured_outputs.");
    sf.reject_unknown({"json", "regex", "choice", "json_object", "grammar"});
    add(sf, "json", "regex", "choice");
    if (sf.boolean("json_object").value_or(false)) out.emplace_back("structured_outputs.json_object", StructuredOutputSpec{});
    if (sf.find("grammar")) throw_bad_request("structured_outputs.grammar", "EBNF grammars are not supported");
  }
  return out;
}

}  // namespace

std::shared_ptr<const TokenConstraintFactory> read_structured_output(const FieldReader& f,
                                                                     const ServingContext& ctx) {
  std::vector<std::pair<std::string, StructuredOutputSpec>> specs = from_vllm_fields(f);
  if (auto spec = from_response_format(f)) specs.emplace_back("response_format", std::move(*spec));
  if (specs.empty()) return nullptr;
  if (specs.size() > 1) {
    throw_bad_request(specs[1].first, "'{}' and '{}' both constrain the output: give one", specs[0].first,
                      specs[1].first);
  }
  return compile_structured_output(ctx, specs[0].second, specs[0].first);
}

std::shared_ptr<const TokenConstraintFactory> compile_structured_output(
    const ServingContext& ctx, const structured::StructuredOutputSpec& spec,
    const std::string& param) {
  if (ctx.grammars == nullptr) {
    throw_bad_request(param, "'{}' needs the model's tokenizer, and this model has none", param);
  }
  try {
    return ctx.grammars->compile(spec);
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    throw_bad_request(param, "'{}': {}", param, e.what());
  }
}

}  // namespace kestrel::server
