#include "cli/structured_flags.h"

#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "structured/spec_fields.h"

namespace kestrel::cli {
namespace {

std::string read_text(const std::string& path, const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  KS_CHECK(in, "{}: cannot read '{}'", flag, path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

void add_structured_flags(CLI::App& app, StructuredFlags& flags) {
  app.add_option("--grammar", flags.grammar,
                 "constrain the output to this grammar: GBNF (rules 'name ::= ...', root "
                 "'root', as llama.cpp reads it) or Lark ('name: ...', root 'start')");
  app.add_option("--grammar-file", flags.grammar_file, "the same, read from a file");
  app.add_option("-j,--json-schema", flags.json_schema,
                 "constrain the output to JSON valid under this schema (its text, or @FILE)");
  app.add_option("--regex", flags.regex,
                 "constrain the output to this regular expression (structured outputs)");
}

std::shared_ptr<const TokenConstraintFactory> compile_structured_flags(const StructuredFlags& flags,
                                                                       const LLM& llm) {
  using Kind = structured::StructuredOutputSpec::Kind;
  std::vector<structured::NamedSpec> specs;
  auto ask = [&](const char* flag, Kind kind) -> structured::StructuredOutputSpec& {
    specs.push_back({flag, {}});
    specs.back().spec.kind = kind;
    return specs.back().spec;
  };
  if (!flags.grammar.empty()) ask("--grammar", Kind::kGrammar).grammar = flags.grammar;
  if (!flags.grammar_file.empty()) {
    ask("--grammar-file", Kind::kGrammar).grammar = read_text(flags.grammar_file, "--grammar-file");
  }
  if (!flags.json_schema.empty()) {
    const std::string text = flags.json_schema.starts_with("@")
                                 ? read_text(flags.json_schema.substr(1), "--json-schema")
                                 : flags.json_schema;
    ask("--json-schema", Kind::kJsonSchema).schema =
        structured::read_schema(nlohmann::ordered_json(text), "--json-schema");
  }
  if (!flags.regex.empty()) ask("--regex", Kind::kRegex).regex = flags.regex;
  const std::optional<structured::NamedSpec> spec = structured::only_spec(std::move(specs));
  if (!spec) return nullptr;
  std::unique_ptr<structured::GrammarCompiler> compiler;
  if (llm.tokenizer() != nullptr) {
    compiler =
        std::make_unique<structured::GrammarCompiler>(std::make_shared<const structured::VocabTrie>(
            structured::VocabTrie::from_tokenizer(*llm.tokenizer(), llm.vocab_size())));
  }
  return structured::compile_spec(compiler.get(), *spec);
}

}  // namespace kestrel::cli
