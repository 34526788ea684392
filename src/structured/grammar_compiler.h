// What a request asks its output to be (vLLM's structured outputs), and the compiler that
// turns it into a Grammar over one vocabulary, with a cache of recent compilations.
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "structured/grammar.h"
#include "structured/regex_ast.h"

namespace kestrel::structured {

// How a tool-call parser marks up one call (server/tool_calls.h): prefix, the JSON object
// {"name": <tool>, <args_key>: <its arguments>}, suffix; several calls joined by separator.
// How calls are written: each call's JSON object between `prefix` and `suffix`, calls
// joined by `separator`, the whole list between `list_prefix` and `list_suffix` (Mistral's
// "[TOOL_CALLS][" ... "]").
struct ToolCallMarkup {
  std::string prefix, suffix, separator;
  std::string args_key = "arguments";
  std::string list_prefix, list_suffix;
};

struct StructuredOutputSpec {
  enum class Kind { kJsonObject, kJsonSchema, kRegex, kChoice, kToolCalls, kGrammar };
  Kind kind = Kind::kJsonObject;
  nlohmann::ordered_json schema;     // kJsonSchema
  std::string regex;                 // kRegex
  std::vector<std::string> choices;  // kChoice: the output is exactly one of them
  std::string grammar;               // kGrammar: GBNF text (ebnf_grammar.h)
  // kToolCalls (a chat's tool_choice "required" or a named function): calls in `markup` to
  // the OpenAI-style `tools` ([{"type": "function", "function": {"name", "parameters"}}]),
  // their arguments valid under each tool's parameters schema; one call or more, at most
  // max_calls of them (0: no limit).
  ToolCallMarkup markup;
  nlohmann::ordered_json tools;
  int max_calls = 0;
};

// The pattern of the text to generate (a grammar's at its deepest nesting). Throws
// kestrel::Error naming what is unsupported or malformed (json_schema.h, regex_parser.h,
// ebnf_grammar.h; an empty choice list).
RegexNode pattern_of(const StructuredOutputSpec& spec);

class GrammarCompiler {
 public:
  // The `cache_size` most recently used grammars are kept (their token masks with them).
  explicit GrammarCompiler(std::shared_ptr<const VocabTrie> vocab, size_t cache_size = 32);

  // The Grammar of `spec`, compiled or from the cache, with the start state's token mask
  // made. A recursive EBNF grammar is compiled at the deepest of kGrammarNestings whose
  // automaton fits. Thread-safe; compiles outside the lock. Throws kestrel::Error as
  // pattern_of, or when the automaton is too large.
  std::shared_ptr<const Grammar> compile(const StructuredOutputSpec& spec);

  const VocabTrie& vocab() const { return *vocab_; }

 private:
  std::shared_ptr<const VocabTrie> vocab_;
  const size_t cache_size_;
  std::mutex mu_;
  std::list<std::string> lru_;  // most recent first
  std::unordered_map<std::string, std::pair<std::shared_ptr<const Grammar>,
                                            std::list<std::string>::iterator>> cache_;
};

}  // namespace kestrel::structured
