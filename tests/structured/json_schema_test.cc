// JSON schemas through the real Qwen3 vocabulary: random token paths through each schema's
// grammar, decoded by the tokenizer, must parse (Node's JSON.parse) and validate (ajv);
// unsupported keywords are errors that name the keyword and where it is.
#include <gtest/gtest.h>

#include <chrono>

#include "core/error.h"
#include "structured/json_schema.h"
#include "structured_test_util.h"

namespace kestrel::structured {
namespace {

using nlohmann::ordered_json;

// Texts of `n` random paths through the grammar that ended (paths still running after
// max_steps are dropped; at least half must end).
std::vector<std::string> sample_texts(const Grammar& g, int n, uint32_t seed, int max_steps = 2000) {
  std::mt19937 rng(seed);
  std::vector<std::string> texts;
  for (int i = 0; i < n; ++i) {
    if (auto tokens = testing::random_walk(g, rng, max_steps)) texts.push_back(testing::qwen3().decode(*tokens));
  }
  EXPECT_GE(texts.size(), size_t(n / 2)) << "too few paths ended";
  return texts;
}

void expect_all_valid(const ordered_json& schema, int n = 40, uint32_t seed = 1) {
  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kJsonSchema;
  spec.schema = schema;
  const auto g = testing::qwen3_compiler().compile(spec);
  const std::vector<std::string> texts = sample_texts(*g, n, seed);
  const std::vector<std::string> errors = testing::ajv_errors(schema, texts);
  ASSERT_EQ(errors.size(), texts.size());
  for (const std::string& e : errors) EXPECT_EQ(e, "") << schema.dump();
}

TEST(JsonSchema, FlatObjectWithRequiredAndOptional) {
  expect_all_valid(ordered_json::parse(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "maxLength": 8},
      "age": {"type": "integer"},
      "ok": {"type": "boolean"},
      "note": {"type": ["string", "null"], "maxLength": 4}
    },
    "required": ["age", "ok"],
    "additionalProperties": false
  })"));
}

TEST(JsonSchema, NoRequiredPropertiesAndEscapedNames) {
  expect_all_valid(ordered_json::parse(R"({
    "type": "object",
    "properties": {"a\"b": {"type": "number"}, "ü/\\": {"const": "ß\n"}, "c": {"type": "null"}}
  })"));
}

TEST(JsonSchema, NestedObjectsArraysEnumsAndRefs) {
  expect_all_valid(ordered_json::parse(R"({
    "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                        "required": ["x", "y"], "additionalProperties": false}},
    "type": "object",
    "properties": {
      "points": {"type": "array", "items": {"$ref": "#/$defs/point"}, "minItems": 1, "maxItems": 3},
      "color": {"enum": ["red", "grün", "蓝", 7, null, {"k": [1, 2]}]},
      "tags": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 3}, "maxItems": 4},
      "meta": {"type": "object", "additionalProperties": {"type": "integer"}},
      "either": {"anyOf": [{"type": "integer"}, {"type": "string", "pattern": "^[a-z]{2}\\d$"}]}
    },
    "required": ["points", "color", "either"]
  })"));
}

TEST(JsonSchema, IntegerBounds) {
  expect_all_valid(ordered_json::parse(R"({
    "type": "object",
    "properties": {
      "age": {"type": "integer", "minimum": 0, "maximum": 130},
      "delta": {"type": "integer", "exclusiveMinimum": -10.5, "exclusiveMaximum": 3},
      "big": {"type": "integer", "minimum": 1000},
      "neg": {"type": ["integer", "null"], "maximum": -7}
    },
    "required": ["age", "delta", "big", "neg"]
  })"), 40, 8);
}

TEST(JsonSchema, StringLengthsCountCodePoints) {
  const ordered_json schema = ordered_json::parse(
      R"({"type": "array", "items": {"type": "string", "minLength": 2, "maxLength": 3}, "minItems": 2, "maxItems": 2})");
  expect_all_valid(schema, 60, 5);
}

TEST(JsonSchema, ScalarsAtTheTop) {
  for (const char* s : {R"({"type": "integer"})", R"({"type": "number"})", R"({"type": "boolean"})",
                        R"({"enum": ["a", "b", "c"]})", R"({"type": "string", "pattern": "[A-Z][a-z\"\\\\]{0,4}"})"}) {
    expect_all_valid(ordered_json::parse(s), 30, 9);
  }
}

TEST(JsonSchema, FreeFormValuesParse) {
  expect_all_valid(ordered_json::parse(R"({"type": "object", "properties": {"any": {}}, "required": ["any"]})"), 30, 3);
  StructuredOutputSpec spec;  // json_object
  const auto g = testing::qwen3_compiler().compile(spec);
  const std::vector<std::string> texts = sample_texts(*g, 30, 4);
  for (const std::string& e : testing::ajv_errors(ordered_json::parse(R"({"type": "object"})"), texts)) {
    EXPECT_EQ(e, "");
  }
  // Strings at different depths are different DFA states with one mask, kept once.
  EXPECT_LT(g->num_distinct_masks(), g->num_cached_masks());
  EXPECT_LT(g->dfa().num_byte_classes(), 64);
  // Four levels of lists in lists, minimised (dfa_minimize.h). The same object as a tool's
  // arguments, in its call's markup: 35,209 states while each list held its item twice
  // (the first and the later ones, which the DFA told apart: x2 a level), 3,349 with one
  // copy (separated()), 1,180 minimised, as Moore's refinement (a throwaway test) gave from
  // the 35,209.
  EXPECT_EQ(g->dfa().num_states(), 1121);
}

// String formats, checked by ajv-formats in its "full" mode (dates by the calendar, times
// and addresses by value), and OpenAPI's numeric ones (int32: whole, within 32 bits).
TEST(JsonSchema, StringFormatsValidateUnderAjvFormats) {
  // The oracle does check formats: an impossible date and a malformed UUID fail in it.
  const std::vector<std::string> wrong = testing::ajv_errors(
      ordered_json::parse(R"({"type": "array", "items": [{"format": "date"}, {"format": "uuid"}]})"),
      {R"(["2023-02-30", "0"])"});
  ASSERT_EQ(wrong.size(), 1u);
  EXPECT_NE(wrong[0], "");
  uint32_t seed = 10;
  for (const char* f : {"date-time", "date", "time", "email", "uuid", "ipv4", "hostname", "uri"}) {
    SCOPED_TRACE(f);
    expect_all_valid(ordered_json{{"type", "string"}, {"format", f}}, 30, ++seed);
  }
  expect_all_valid(ordered_json::parse(R"({"type": "object", "properties": {
      "when": {"type": "string", "format": "date-time"}, "n": {"type": "integer", "format": "int32"},
      "m": {"type": "number", "format": "int32", "minimum": -5}, "x": {"type": "number", "format": "double"},
      "big": {"type": "integer", "format": "int64"}, "who": {"format": "email"}},
      "required": ["when", "n", "m", "x", "big", "who"]})"), 20);
}

// Bounds on numbers (Pydantic's confloat(ge=0, le=1) and the like): every sample valid in
// ajv; by hand, what the pattern takes at the edges.
TEST(JsonSchema, NumberBounds) {
  const char* schemas[] = {
      R"({"type": "number", "minimum": 0, "maximum": 1})",
      R"({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1})",
      R"({"type": "number", "minimum": -2.5, "maximum": 3.7})",
      R"({"type": "number", "exclusiveMaximum": -3})",
      R"({"type": "number", "minimum": 100, "exclusiveMinimum": 100})",
  };
  uint32_t seed = 40;
  for (const char* text : schemas) expect_all_valid(ordered_json::parse(text), 30, ++seed);
  auto accepts = [](const char* schema, const std::string& value) {
    StructuredOutputSpec spec;
    spec.kind = StructuredOutputSpec::Kind::kJsonSchema;
    spec.schema = ordered_json::parse(schema);
    return testing::dfa_accepts(testing::qwen3_compiler().compile(spec)->dfa(), value);
  };
  for (const char* v : {"0", "1", "0.5", "0.999", "0.05"}) EXPECT_TRUE(accepts(schemas[0], v)) << v;
  for (const char* v : {"1.5", "-0.5", "2", "0.50", "1e0"}) EXPECT_FALSE(accepts(schemas[0], v)) << v;
  for (const char* v : {"0.5", "0.0001"}) EXPECT_TRUE(accepts(schemas[1], v)) << v;
  for (const char* v : {"0", "1", "0.0"}) EXPECT_FALSE(accepts(schemas[1], v)) << v;
  for (const char* v : {"-2", "3", "-1.5", "2.9", "-0.25"}) EXPECT_TRUE(accepts(schemas[2], v)) << v;
  for (const char* v : {"-3", "4", "3.5", "-2.2"}) EXPECT_FALSE(accepts(schemas[2], v)) << v;
  for (const char* v : {"-4", "-3.5", "-1000000"}) EXPECT_TRUE(accepts(schemas[3], v)) << v;
  for (const char* v : {"-3", "-2.5", "0"}) EXPECT_FALSE(accepts(schemas[3], v)) << v;
  for (const char* v : {"101", "100.5"}) EXPECT_TRUE(accepts(schemas[4], v)) << v;
  EXPECT_FALSE(accepts(schemas[4], "100"));
}

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  const std::vector<std::pair<const char*, const char*>> bad = {
      {R"({"type": "number", "minimum": 0.25, "maximum": 0.75})", "no number between the bounds at /"},
      {R"({"type": "integer", "multipleOf": 3})", "unsupported JSON schema keyword 'multipleOf' at /"},
      {R"({"type": "integer", "minimum": 5, "exclusiveMaximum": 5})", "no integer"},
      {R"({"type": "object", "properties": {"d": {"type": "string", "format": "ipv6"}}})", "format 'ipv6' at /properties/d"},
      {R"({"type": "string", "format": "date", "maxLength": 8})", "'format' together with 'maxLength'"},
      {R"({"type": "integer", "format": "uint8"})", "format 'uint8' at / is not supported on numbers"},
      {R"({"oneOf": [{"type": "integer"}]})", "'oneOf'"},
      {R"({"type": "array", "uniqueItems": true})", "'uniqueItems'"},
      {R"({"$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}}, "$ref": "#/$defs/n"})", "recursive"},
      {R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})", "'b'"},
      {R"({"type": "strin"})", "unknown JSON schema type 'strin'"},
      {R"j({"type": "string", "pattern": "(?=x)"})j", "lookahead"},
      {R"({"enum": [1], "maxLength": 3})", "'enum' together with 'maxLength'"},
      {R"(false)", "matches nothing"},
  };
  for (const auto& [text, words] : bad) {
    try {
      json_schema_pattern(ordered_json::parse(text));
      ADD_FAILURE() << text << " compiled";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << text << ": " << e.what();
    }
  }
}

// Schemas whose patterns grow faster than their text fail fast with an error naming the
// place, before the pattern's memory is spent: an object of 5,000 optional properties (its
// pattern grows with the square: a server probe's request took 24 GB and the process), and
// $refs that each use the next twice (2^30 copies). 60 optional properties still compile.
TEST(JsonSchema, RunawayPatternsAreErrorsNotMemory) {
  ordered_json wide = {{"type", "object"}, {"properties", ordered_json::object()}};
  for (int i = 0; i < 5000; ++i) {
    wide["properties"]["property_" + std::to_string(i)] = {{"type", "string"}, {"description", "d"}};
  }
  ordered_json refs = {{"$defs", ordered_json::object()}, {"$ref", "#/$defs/d0"}};
  for (int i = 0; i < 30; ++i) {
    const std::string next = "#/$defs/d" + std::to_string(i + 1);
    refs["$defs"]["d" + std::to_string(i)] = {
        {"type", "object"},
        {"properties", {{"a", {{"$ref", next}}}, {"b", {{"$ref", next}}}}},
        {"required", {"a", "b"}}};
  }
  refs["$defs"]["d30"] = {{"type", "integer"}};
  for (const auto& [schema, where] : {std::pair{wide, "at /"}, std::pair{refs, "at /"}}) {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      json_schema_pattern(schema);
      ADD_FAILURE() << "compiled";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("makes a pattern of more than"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
    }
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
  }
  ordered_json sixty = {{"type", "object"}, {"properties", ordered_json::object()}};
  for (int i = 0; i < 60; ++i) sixty["properties"]["p" + std::to_string(i)] = {{"type", "integer"}};
  EXPECT_NO_THROW(json_schema_pattern(sixty));
}

}  // namespace
}  // namespace kestrel::structured
