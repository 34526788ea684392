// Structured-output flags of the commands that generate (llama.cpp's names where it has them):
// --grammar / --grammar-file (GBNF or Lark), --json-schema (text, or @FILE), --regex. At most
// one is given; the output of every prompt is then constrained to it.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "kestrel/llm.h"
#include "kestrel/token_constraint.h"

namespace kestrel::cli {

struct StructuredFlags {
  std::string grammar, grammar_file, json_schema, regex;
};

void add_structured_flags(CLI::App& app, StructuredFlags& flags);

// The constraint the flags ask for over `llm`'s vocabulary, or null for none. Throws
// kestrel::Error naming the flag for two at once, a model without a tokenizer, a file that
// cannot be read, and what the compiler refuses (structured/spec_fields.h's checks and
// messages, as for the server's fields).
std::shared_ptr<const TokenConstraintFactory> compile_structured_flags(const StructuredFlags& flags,
                                                                       const LLM& llm);

}  // namespace kestrel::cli
