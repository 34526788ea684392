#include "cli/structured_flags.h"

#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "core/error.h"
#include "structured/grammar_compiler.h"

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

void add_structured_flags(CLI::App& app, StructuredFlags& flags, bool with_grammar) {
  if (with_grammar) {
    app.add_option("--grammar", flags.grammar,
                   "constrain the output to this grammar: GBNF (rules 'name ::= ...', root "
                   "'root', as llama.cpp reads it) or Lark ('name: ...', root 'start')");
    app.add_option("--grammar-file", flags.grammar_file, "the same, read from a file");
    app.add_option("-j,--json-schema", flags.json_schema,
                   "constrain the output to JSON valid under this schema (its text, or @FILE)");
  }
  app.add_option("--regex", flags.regex,
                 "constrain the output to this regular expression (structured outputs)");
}

std::shared_ptr<const TokenConstraintFactory> compile_structured_flags(const StructuredFlags& flags,
                                                                       const LLM& llm) {
  using Kind = structured::StructuredOutputSpec::Kind;
  std::vector<std::pair<std::string, structured::StructuredOutputSpec>> asked;
  auto ask = [&](const std::string& flag, Kind kind) -> structured::StructuredOutputSpec& {
    asked.emplace_back(flag, structured::StructuredOutputSpec{});
    asked.back().second.kind = kind;
    return asked.back().second;
  };
  if (!flags.grammar.empty()) ask("--grammar", Kind::kGrammar).grammar = flags.grammar;
  if (!flags.grammar_file.empty()) {
    ask("--grammar-file", Kind::kGrammar).grammar = read_text(flags.grammar_file, "--grammar-file");
  }
  if (!flags.json_schema.empty()) {
    const std::string text = flags.json_schema.starts_with("@")
                                 ? read_text(flags.json_schema.substr(1), "--json-schema")
                                 : flags.json_schema;
    try {
      ask("--json-schema", Kind::kJsonSchema).schema = nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw_error("--json-schema is not valid JSON: {}", e.what());
    }
  }
  if (!flags.regex.empty()) ask("--regex", Kind::kRegex).regex = flags.regex;
  if (asked.empty()) return nullptr;
  KS_CHECK(asked.size() == 1, "{} and {} both constrain the output: give one", asked[0].first,
           asked[1].first);
  KS_CHECK(llm.tokenizer() != nullptr, "{}: the model has no tokenizer", asked[0].first);
  structured::GrammarCompiler compiler(std::make_shared<const structured::VocabTrie>(
      structured::VocabTrie::from_tokenizer(*llm.tokenizer(), llm.vocab_size())));
  try {
    return compiler.compile(asked[0].second);
  } catch (const Error& e) {
    throw_error("{}: {}", asked[0].first, e.what());
  }
}

}  // namespace kestrel::cli
