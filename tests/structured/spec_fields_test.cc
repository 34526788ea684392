// vLLM's structured-output fields as the server and the Python package read them: each
// form into its spec, and every mistake a SpecError naming the field at fault.
#include "structured/spec_fields.h"

#include <gtest/gtest.h>

namespace kestrel::structured {
namespace {

using nlohmann::ordered_json;
using Kind = StructuredOutputSpec::Kind;

// The param and message of the SpecError that `f` throws ("" when it throws none).
template <typename F>
std::pair<std::string, std::string> error_of(F&& f) {
  try {
    f();
  } catch (const SpecError& e) {
    return {e.param(), e.what()};
  }
  return {"", ""};
}

TEST(SpecFields, EachFormOfStructuredOutputs) {
  auto one = [](const char* text) {
    std::vector<NamedSpec> specs = read_structured_outputs(ordered_json::parse(text), "so");
    EXPECT_EQ(specs.size(), 1u) << text;
    return specs.empty() ? NamedSpec{} : specs[0];
  };
  NamedSpec s = one(R"({"json": {"type": "integer"}})");
  EXPECT_EQ(s.param, "so.json");
  EXPECT_EQ(s.spec.kind, Kind::kJsonSchema);
  EXPECT_EQ(s.spec.schema, ordered_json::parse(R"({"type": "integer"})"));
  // vLLM takes the schema as a string as well.
  EXPECT_EQ(one(R"({"json": "{\"type\": \"integer\"}"})").spec.schema, s.spec.schema);
  s = one(R"({"regex": "a+", "choice": null})");
  EXPECT_EQ(s.spec.kind, Kind::kRegex);
  EXPECT_EQ(s.spec.regex, "a+");
  s = one(R"({"choice": ["yes", "no"]})");
  EXPECT_EQ(s.spec.kind, Kind::kChoice);
  EXPECT_EQ(s.spec.choices, (std::vector<std::string>{"yes", "no"}));
  s = one(R"({"grammar": "root ::= \"a\" | \"b\""})");
  EXPECT_EQ(s.param, "so.grammar");
  EXPECT_EQ(s.spec.kind, Kind::kGrammar);
  EXPECT_EQ(s.spec.grammar, R"(root ::= "a" | "b")");
  s = one(R"({"json_object": true})");
  EXPECT_EQ(s.param, "so.json_object");
  EXPECT_EQ(s.spec.kind, Kind::kJsonObject);
  EXPECT_TRUE(
      read_structured_outputs(ordered_json::parse(R"({"json_object": false})"), "so").empty());
}

TEST(SpecFields, MistakesNameTheField) {
  auto so = [](const char* text) {
    return error_of([&] { read_structured_outputs(ordered_json::parse(text), "so"); });
  };
  EXPECT_EQ(so(R"([1])").first, "so");
  EXPECT_EQ(so(R"({"jsn": {}})"),
            std::make_pair(std::string("so.jsn"),
                           std::string("Unrecognized request argument supplied: so.jsn")));
  EXPECT_EQ(so(R"({"json": 3})").first, "so.json");
  EXPECT_EQ(so(R"({"json": "{not json"})").first, "so.json");
  EXPECT_EQ(so(R"({"regex": 3})").first, "so.regex");
  EXPECT_EQ(so(R"({"choice": []})").second, "'so.choice' must be a non-empty list of strings");
  EXPECT_EQ(so(R"({"choice": ["a", 1]})").first, "so.choice");
  EXPECT_EQ(so(R"({"json_object": "yes"})").first, "so.json_object");
  EXPECT_EQ(so(R"({"grammar": ["root ::= \"a\""]})"),
            std::make_pair(std::string("so.grammar"),
                           std::string("'so.grammar' must be a string (a GBNF grammar)")));
}

TEST(SpecFields, OnlyOneSpec) {
  EXPECT_FALSE(only_spec({}).has_value());
  std::vector<NamedSpec> two =
      read_structured_outputs(ordered_json::parse(R"({"regex": "a", "choice": ["b"]})"), "so");
  EXPECT_EQ(error_of([&] { only_spec(two); }),
            std::make_pair(
                std::string("so.choice"),
                std::string("'so.regex' and 'so.choice' both constrain the output: give one")));
  std::vector<NamedSpec> guided;
  read_spec_fields(ordered_json::parse(R"({"guided_regex": "a"})"), "",
                   {"guided_json", "guided_regex", "guided_choice", "guided_grammar"}, guided);
  ASSERT_EQ(guided.size(), 1u);
  EXPECT_EQ(only_spec(guided)->param, "guided_regex");
}

TEST(SpecFields, CompileNamesTheField) {
  NamedSpec s{"so.regex", {}};
  s.spec.kind = Kind::kRegex;
  s.spec.regex = "a";
  EXPECT_EQ(error_of([&] { compile_spec(nullptr, s); }).second,
            "'so.regex' needs the model's tokenizer, and this model has none");
  GrammarCompiler compiler(
      std::make_shared<const VocabTrie>(std::vector<std::string>{"a", "b"}, 2));
  EXPECT_NE(compile_spec(&compiler, s), nullptr);
  s.spec.regex = "(?=a)b";  // lookahead: the compiler refuses it
  const auto [param, message] = error_of([&] { compile_spec(&compiler, s); });
  EXPECT_EQ(param, "so.regex");
  EXPECT_EQ(message.rfind("'so.regex': ", 0), 0u) << message;
}

}  // namespace
}  // namespace kestrel::structured
