// What a request can make the structured-output compiler spend: text past
// kMaxPatternTextBytes is refused by its size before it is read (an 8 MB regex, grammar or
// choice took 1.5 GB and 3 s to refuse), and a schema object is measured as its properties
// are made (300,000 required properties took 150 s and 3.6 GB). The wall-clock bounds are
// far above what the refusals take now: they catch a return of the old cost, not a speed.
#include <gtest/gtest.h>

#include <chrono>

#include "core/error.h"
#include "structured_test_util.h"

namespace kestrel::structured {
namespace {

using Kind = StructuredOutputSpec::Kind;

std::string refusal(const StructuredOutputSpec& spec) {
  static GrammarCompiler compiler(
      std::make_shared<const VocabTrie>(std::vector<std::string>{"a", "b"}, 2));
  try {
    compiler.compile(spec);
  } catch (const Error& e) {
    return e.what();
  }
  return "compiled";
}

TEST(PatternLimits, TextPastTheLimitIsRefusedByItsSize) {
  const std::string big(kMaxPatternTextBytes + 1, 'a');
  const std::string limit = "more than the " + std::to_string(kMaxPatternTextBytes);
  StructuredOutputSpec regex;
  regex.kind = Kind::kRegex;
  regex.regex = big;
  EXPECT_NE(refusal(regex).find("regex: " + std::to_string(big.size()) + " bytes, " + limit), std::string::npos)
      << refusal(regex);
  StructuredOutputSpec grammar;
  grammar.kind = Kind::kGrammar;
  grammar.grammar = "root ::= \"" + big + "\"";
  EXPECT_NE(refusal(grammar).find("grammar: "), std::string::npos) << refusal(grammar);
  EXPECT_NE(refusal(grammar).find(limit), std::string::npos) << refusal(grammar);
  // Choices: one too long, or many that together are.
  StructuredOutputSpec choice;
  choice.kind = Kind::kChoice;
  choice.choices = {big};
  EXPECT_NE(refusal(choice).find("the choices hold"), std::string::npos) << refusal(choice);
  choice.choices.assign(2000, std::string(kMaxPatternTextBytes / 1000, 'b'));
  EXPECT_NE(refusal(choice).find(limit), std::string::npos) << refusal(choice);
  // An enum's values together, and one const.
  StructuredOutputSpec schema;
  schema.kind = Kind::kJsonSchema;
  nlohmann::ordered_json values = nlohmann::ordered_json::array();
  for (int i = 0; i < 100000; ++i) values.push_back(i);
  schema.schema = {{"enum", values}};
  EXPECT_NE(refusal(schema).find("the values of 'enum' at / hold more than the"), std::string::npos)
      << refusal(schema);
  schema.schema = {{"const", big}};
  EXPECT_NE(refusal(schema).find("the values of 'const' at / hold more than"), std::string::npos)
      << refusal(schema);
}

TEST(PatternLimits, ObjectsAreMeasuredAsTheirPropertiesAreMade) {
  // Made as the vector of pairs an ordered_json object is: inserting each key through the
  // object (a scan of the keys before it) would itself take minutes.
  nlohmann::ordered_json props = nlohmann::ordered_json::object();
  auto& pairs = static_cast<std::vector<std::pair<const std::string, nlohmann::ordered_json>>&>(
      *props.get_ptr<nlohmann::ordered_json::object_t*>());
  nlohmann::ordered_json required = nlohmann::ordered_json::array();
  for (int i = 0; i < 300000; ++i) {
    pairs.emplace_back("p" + std::to_string(i), nlohmann::ordered_json{{"type", "integer"}});
    required.push_back("p" + std::to_string(i));
  }
  StructuredOutputSpec schema;
  schema.kind = Kind::kJsonSchema;
  schema.schema = {{"type", "object"}, {"properties", props}, {"required", required}};
  const auto start = std::chrono::steady_clock::now();
  EXPECT_NE(refusal(schema).find("makes a pattern of more than 500000 parts"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

}  // namespace
}  // namespace kestrel::structured
