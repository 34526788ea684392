#include "server/structured_request.h"

#include <optional>
#include <string>
#include <utility>

#include "server/api_error.h"
#include "server/request_fields.h"
#include "structured/grammar_compiler.h"
#include "structured/spec_fields.h"

namespace kestrel::server {
namespace {

using structured::StructuredOutputSpec;
using Kind = StructuredOutputSpec::Kind;
using structured::NamedSpec;

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
  spec.schema = structured::read_schema(*schema, "response_format.json_schema.schema");
  return spec;
}

// vLLM's fields: guided_* at the top level, or the structured_outputs object.
std::vector<NamedSpec> from_vllm_fields(const FieldReader& f) {
  std::vector<NamedSpec> out;
  structured::read_spec_fields(f.object(), "", {"guided_json", "guided_regex", "guided_choice", "guided_grammar"},
                               out);
  (void)f.string("guided_decoding_backend");  // one backend here: any name selects it
  if (f.find("guided_whitespace_pattern")) {
    throw_bad_request("guided_whitespace_pattern", "'guided_whitespace_pattern' is not supported");
  }
  if (const auto* so = f.find("structured_outputs")) {
    for (NamedSpec& s : structured::read_structured_outputs(*so, "structured_outputs")) out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

std::shared_ptr<const TokenConstraintFactory> read_structured_output(const FieldReader& f,
                                                                     const ServingContext& ctx) {
  std::optional<NamedSpec> spec;
  try {
    std::vector<NamedSpec> specs = from_vllm_fields(f);
    if (auto rf = from_response_format(f)) specs.push_back({"response_format", std::move(*rf)});
    spec = structured::only_spec(std::move(specs));
  } catch (const structured::SpecError& e) {
    throw ApiError(400, e.what(), e.param());
  }
  if (!spec) return nullptr;
  return compile_structured_output(ctx, spec->spec, spec->param);
}

std::shared_ptr<const TokenConstraintFactory> compile_structured_output(
    const ServingContext& ctx, const structured::StructuredOutputSpec& spec,
    const std::string& param) {
  try {
    return structured::compile_spec(ctx.grammars, {param, spec});
  } catch (const structured::SpecError& e) {
    throw ApiError(400, e.what(), e.param());
  }
}

}  // namespace kestrel::server
