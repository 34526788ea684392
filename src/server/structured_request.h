// Structured outputs in a request body: OpenAI's response_format (json_object, json_schema)
// and vLLM's guided_json, guided_regex, guided_choice and structured_outputs
// ({"json" | "regex" | "choice" | "json_object": ...}), compiled into the token constraint
// the engine applies (src/structured). vLLM's fields are read by structured/spec_fields.h,
// which the Python package shares. docs/server.md lists what is supported.
#pragma once

#include <memory>
#include <string>

#include "kestrel/token_constraint.h"
#include "server/request_parser.h"
#include "structured/grammar_compiler.h"

namespace kestrel::server {

// The constraint the request asks for, or nullptr for none ({"type": "text"}). Throws a
// 400 ApiError naming the field for a malformed value, more than one form at once, a
// model without a tokenizer, and what the compiler refuses (its message names the
// unsupported JSON schema keyword or regex feature).
std::shared_ptr<const TokenConstraintFactory> read_structured_output(const FieldReader& f,
                                                                     const ServingContext& ctx);

// The constraint of `spec`, from ctx.grammars; errors are 400s naming `param`.
std::shared_ptr<const TokenConstraintFactory> compile_structured_output(
    const ServingContext& ctx, const structured::StructuredOutputSpec& spec,
    const std::string& param);

}  // namespace kestrel::server
