#include "structured/spec_fields.h"

#include <utility>

#include "core/json_parse.h"

namespace kestrel::structured {
namespace {

using Kind = StructuredOutputSpec::Kind;

template <typename... Args>
[[noreturn]] void fail(const std::string& param, fmt::format_string<Args...> format,
                       Args&&... args) {
  throw SpecError(param, fmt::format(format, std::forward<Args>(args)...));
}

// The field, or nullptr when absent or null (OpenAI's API treats null as absent).
const nlohmann::ordered_json* find(const nlohmann::ordered_json& object, const std::string& key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

std::vector<std::string> read_choices(const nlohmann::ordered_json& v, const std::string& param) {
  if (!v.is_array() || v.empty()) fail(param, "'{}' must be a non-empty list of strings", param);
  std::vector<std::string> out;
  for (const auto& c : v) {
    if (!c.is_string()) fail(param, "'{}' must be a non-empty list of strings", param);
    out.push_back(c.get<std::string>());
  }
  return out;
}

}  // namespace

nlohmann::ordered_json read_schema(const nlohmann::ordered_json& value, const std::string& param) {
  if (value.is_object() || value.is_boolean()) return value;
  if (value.is_string()) {
    try {
      return parse_untrusted_json(value.get<std::string>());
    } catch (const JsonLimitError& e) {
      fail(param, "'{}' is a string whose JSON {}", param, e.what());
    } catch (const nlohmann::json::exception&) {
      fail(param, "'{}' is a string that is not a JSON schema", param);
    }
  }
  fail(param, "'{}' must be a JSON schema (an object), got {}", param, value.type_name());
}

void read_spec_fields(const nlohmann::ordered_json& object, const std::string& prefix,
                      const SpecKeys& keys, std::vector<NamedSpec>& out) {
  if (const auto* v = find(object, keys.json)) {
    NamedSpec s{prefix + keys.json, {}};
    s.spec.kind = Kind::kJsonSchema;
    s.spec.schema = read_schema(*v, s.param);
    out.push_back(std::move(s));
  }
  if (const auto* v = find(object, keys.regex)) {
    NamedSpec s{prefix + keys.regex, {}};
    if (!v->is_string()) fail(s.param, "'{}' must be a string", s.param);
    s.spec.kind = Kind::kRegex;
    s.spec.regex = v->get<std::string>();
    out.push_back(std::move(s));
  }
  if (const auto* v = find(object, keys.choice)) {
    NamedSpec s{prefix + keys.choice, {}};
    s.spec.kind = Kind::kChoice;
    s.spec.choices = read_choices(*v, s.param);
    out.push_back(std::move(s));
  }
  if (const auto* v = find(object, keys.grammar)) {
    NamedSpec s{prefix + keys.grammar, {}};
    if (!v->is_string()) fail(s.param, "'{}' must be a string (a GBNF grammar)", s.param);
    s.spec.kind = Kind::kGrammar;
    s.spec.grammar = v->get<std::string>();
    out.push_back(std::move(s));
  }
}

std::vector<NamedSpec> read_structured_outputs(const nlohmann::ordered_json& value,
                                               const std::string& param) {
  if (!value.is_object())
    fail(param, "'{}' must be a JSON object, got {}", param, value.type_name());
  const std::string prefix = param + ".";
  for (const auto& [key, v] : value.items()) {
    if (key != "json" && key != "regex" && key != "choice" && key != "json_object" &&
        key != "grammar") {
      fail(prefix + key, "Unrecognized request argument supplied: {}{}", prefix, key);
    }
  }
  std::vector<NamedSpec> out;
  read_spec_fields(value, prefix, {"json", "regex", "choice", "grammar"}, out);
  if (const auto* v = find(value, "json_object")) {
    if (!v->is_boolean())
      fail(prefix + "json_object", "'{}json_object' must be a boolean, got {}", prefix,
           v->type_name());
    if (v->get<bool>()) out.push_back({prefix + "json_object", StructuredOutputSpec{}});
  }
  return out;
}

std::optional<NamedSpec> only_spec(std::vector<NamedSpec> specs) {
  if (specs.empty()) return std::nullopt;
  if (specs.size() > 1) {
    fail(specs[1].param, "'{}' and '{}' both constrain the output: give one", specs[0].param,
         specs[1].param);
  }
  return std::move(specs[0]);
}

std::shared_ptr<const Grammar> compile_spec(GrammarCompiler* grammars, const NamedSpec& spec) {
  if (grammars == nullptr)
    fail(spec.param, "'{}' needs the model's tokenizer, and this model has none", spec.param);
  try {
    return grammars->compile(spec.spec);
  } catch (const SpecError&) {
    throw;
  } catch (const Error& e) {
    fail(spec.param, "'{}': {}", spec.param, e.what());
  }
}

}  // namespace kestrel::structured
