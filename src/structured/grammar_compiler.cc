#include "structured/grammar_compiler.h"

#include "core/error.h"
#include "structured/ebnf_grammar.h"
#include "structured/json_schema.h"
#include "structured/regex_parser.h"

namespace kestrel::structured {
namespace {

std::string cache_key(const StructuredOutputSpec& spec) {
  std::string key(1, "osrctg"[static_cast<int>(spec.kind)]);
  switch (spec.kind) {
    case StructuredOutputSpec::Kind::kJsonObject:
      break;
    case StructuredOutputSpec::Kind::kJsonSchema:
      key += spec.schema.dump();
      break;
    case StructuredOutputSpec::Kind::kRegex:
      key += spec.regex;
      break;
    case StructuredOutputSpec::Kind::kGrammar:
      key += spec.grammar;
      break;
    case StructuredOutputSpec::Kind::kChoice:
      key += nlohmann::json(spec.choices).dump();
      break;
    case StructuredOutputSpec::Kind::kToolCalls:
      key += nlohmann::json({spec.markup.prefix, spec.markup.suffix, spec.markup.separator,
                             spec.markup.args_key, spec.markup.list_prefix,
                             spec.markup.list_suffix, spec.max_calls})
                 .dump() +
             spec.tools.dump();
      break;
  }
  return key;
}

// One call to any of `tools` in `markup`: the prefix, {"name": <name>, <args_key>: <args>}
// (compact, as every JSON pattern here), the suffix.
RegexNode tool_call_pattern(const ToolCallMarkup& markup, const nlohmann::ordered_json& tools) {
  KS_CHECK(tools.is_array() && !tools.empty(), "tool calls need at least one tool");
  std::vector<RegexNode> calls;
  // Each tool's schema is held to kMaxPatternNodes alone; so is their sum, checked as it
  // grows: 2,000 tools of {"type": "object"} took 90 s of CPU to refuse at the automaton.
  size_t nodes = 0;
  for (const auto& tool : tools) {
    const nlohmann::ordered_json& fn = tool.at("function");
    nlohmann::ordered_json params = fn.contains("parameters") ? fn.at("parameters")
                                                              : nlohmann::ordered_json::object();
    if (params.empty()) params = {{"type", "object"}};
    // The parameters' definitions go to the root of the call's schema, where their
    // "#/$defs/..." references (Pydantic's, for every enum and nested model) now resolve.
    nlohmann::ordered_json defs;
    for (const char* key : {"$defs", "definitions"}) {
      if (params.is_object() && params.contains(key)) {
        defs[key] = params.at(key);
        params.erase(key);
      }
    }
    nlohmann::ordered_json object = {
        {"type", "object"},
        {"properties", {{"name", {{"enum", {fn.at("name")}}}}, {markup.args_key, params}}},
        {"required", {"name", markup.args_key}},
        {"additionalProperties", false}};
    if (!defs.is_null()) object.update(defs);
    calls.push_back(concat({literal(markup.prefix), json_schema_pattern(object),
                            literal(markup.suffix)}));
    nodes += node_count(calls.back());
    KS_CHECK(nodes <= kMaxPatternNodes,
             "the {} tools' parameter schemas make a pattern of more than {} parts; give fewer "
             "tools or simpler schemas",
             tools.size(), kMaxPatternNodes);
  }
  return alt(std::move(calls));
}

// The automaton of `spec`; a recursive grammar's at the deepest nesting that fits.
ByteDfa dfa_of(const StructuredOutputSpec& spec) {
  if (spec.kind != StructuredOutputSpec::Kind::kGrammar) return ByteDfa::build(pattern_of(spec));
  const EbnfGrammar grammar = EbnfGrammar::parse(spec.grammar);
  const size_t tries = grammar.recursive() ? std::size(kGrammarNestings) : 1;
  for (size_t i = 0;; ++i) {
    try {
      return ByteDfa::build(grammar.pattern(kGrammarNestings[i]));
    } catch (const PatternTooLarge&) {
      if (i + 1 == tries) throw;
    }
  }
}

}  // namespace

RegexNode pattern_of(const StructuredOutputSpec& spec) {
  switch (spec.kind) {
    case StructuredOutputSpec::Kind::kJsonObject:
      return json_object_pattern();
    case StructuredOutputSpec::Kind::kJsonSchema:
      return json_schema_pattern(spec.schema);
    case StructuredOutputSpec::Kind::kRegex:
      return parse_regex(spec.regex);
    case StructuredOutputSpec::Kind::kGrammar:
      return EbnfGrammar::parse(spec.grammar).pattern(kGrammarNestings[0]);
    case StructuredOutputSpec::Kind::kChoice: {
      KS_CHECK(!spec.choices.empty(), "the choice list is empty");
      size_t bytes = 0;
      for (const std::string& c : spec.choices) bytes += c.size();
      KS_CHECK(bytes <= kMaxPatternTextBytes,
               "the choices hold {} bytes, more than the {} a pattern may be made of", bytes,
               kMaxPatternTextBytes);
      std::vector<RegexNode> options;
      for (const std::string& c : spec.choices) options.push_back(literal(c));
      return alt(std::move(options));
    }
    case StructuredOutputSpec::Kind::kToolCalls: {
      RegexNode one = tool_call_pattern(spec.markup, spec.tools);
      KS_CHECK(spec.max_calls >= 0, "max_calls must be >= 0, got {}", spec.max_calls);
      std::vector<RegexNode> parts;
      if (!spec.markup.list_prefix.empty()) parts.push_back(literal(spec.markup.list_prefix));
      if (spec.max_calls != 1) {
        RegexNode more = repeat(concat({literal(spec.markup.separator), one}), 0,
                                spec.max_calls == 0 ? -1 : spec.max_calls - 1);
        parts.push_back(std::move(one));
        parts.push_back(std::move(more));
      } else {
        parts.push_back(std::move(one));
      }
      if (!spec.markup.list_suffix.empty()) parts.push_back(literal(spec.markup.list_suffix));
      return parts.size() == 1 ? std::move(parts[0]) : concat(std::move(parts));
    }
  }
  throw_error("unknown structured output kind");
}

GrammarCompiler::GrammarCompiler(std::shared_ptr<const VocabTrie> vocab, size_t cache_size)
    : vocab_(std::move(vocab)), cache_size_(cache_size) {}

std::shared_ptr<const Grammar> GrammarCompiler::compile(const StructuredOutputSpec& spec) {
  const std::string key = cache_key(spec);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.second);
      return it->second.first;
    }
  }
  std::shared_ptr<const Grammar> grammar = std::make_shared<Grammar>(dfa_of(spec), vocab_);
  // The first step's mask, made here (the caller's thread) rather than in a batch's step.
  grammar->mask(grammar->dfa().start());
  std::lock_guard<std::mutex> lock(mu_);
  if (cache_.contains(key)) return cache_[key].first;  // compiled meanwhile by another thread
  lru_.push_front(key);
  cache_[key] = {grammar, lru_.begin()};
  while (cache_.size() > cache_size_) {
    cache_.erase(lru_.back());
    lru_.pop_back();
  }
  return grammar;
}

}  // namespace kestrel::structured
