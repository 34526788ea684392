// vLLM's request fields that ask for structured outputs, read into StructuredOutputSpecs:
// guided_json / guided_regex / guided_choice / guided_grammar and the structured_outputs
// object ({"json" | "regex" | "choice" | "grammar" | "json_object": ...}). One reading for the HTTP server
// (server/structured_request.h) and the Python package (SamplingParams.structured_outputs),
// so that both accept the same values and give the same messages.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "structured/grammar_compiler.h"

namespace kestrel::structured {

// A malformed field; param() names it as the request spelt it ("guided_regex",
// "structured_outputs.choice"), the message names it too.
class SpecError : public Error {
 public:
  SpecError(std::string param, const std::string& message)
      : Error(message), param_(std::move(param)) {}
  const std::string& param() const { return param_; }

 private:
  std::string param_;
};

// A spec and the field that asked for it.
struct NamedSpec {
  std::string param;
  StructuredOutputSpec spec;
};

// A JSON schema given as an object, a boolean, or (vLLM) a string holding one. Throws
// SpecError naming `param`.
nlohmann::ordered_json read_schema(const nlohmann::ordered_json& value, const std::string& param);

// The names of the fields that ask for each form.
struct SpecKeys {
  const char* json;
  const char* regex;
  const char* choice;
  const char* grammar;
};

// Appends to `out` what the fields `keys` of `object` (a JSON object) ask for, each named
// prefix + key; a field that is absent or null asks for nothing. Throws SpecError for a
// malformed value.
void read_spec_fields(const nlohmann::ordered_json& object, const std::string& prefix,
                      const SpecKeys& keys, std::vector<NamedSpec>& out);

// What vLLM's structured_outputs object `value` asks for, its fields named `param` + "." +
// key. Throws SpecError when it is not an object, has a field it does not know, or a field
// is malformed.
std::vector<NamedSpec> read_structured_outputs(const nlohmann::ordered_json& value,
                                               const std::string& param);

// The one spec of `specs`, nullopt for none. Throws SpecError naming the second when there
// are several: a request constrains its output one way.
std::optional<NamedSpec> only_spec(std::vector<NamedSpec> specs);

// The constraint of `spec` from `grammars` (null: the model has no tokenizer). Throws
// SpecError naming spec.param without grammars, and with the compiler's message (the
// unsupported JSON schema keyword or regex feature) when it refuses the spec.
std::shared_ptr<const Grammar> compile_spec(GrammarCompiler* grammars, const NamedSpec& spec);

}  // namespace kestrel::structured
