// Token masks over the real Qwen3 vocabulary: a token is allowed exactly when its bytes
// keep the pattern alive, EOS only where the text so far is complete, and choices and
// regexes come out whole.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <set>

#include "core/error.h"
#include "structured_test_util.h"

namespace kestrel::structured {
namespace {

std::shared_ptr<const Grammar> compile_regex(const std::string& re) {
  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kRegex;
  spec.regex = re;
  return testing::qwen3_compiler().compile(spec);
}

// A token is allowed iff walking its bytes from the state does not die.
void expect_mask_exact(const Grammar& g, int32_t state) {
  const std::span<const uint32_t> mask = g.mask(state);
  ASSERT_EQ(static_cast<int>(mask.size()), (testing::kModelVocab + 31) / 32);
  for (int id = 0; id < testing::kModelVocab; ++id) {
    const bool expect = id < g.vocab().num_ids() && !g.vocab().bytes(id).empty() &&
                        g.walk(state, g.vocab().bytes(id)) != ByteDfa::kDead;
    ASSERT_EQ(testing::allowed(mask, id), expect) << "token " << id << " state " << state;
  }
}

TEST(Grammar, MaskIsExactlyTheLiveTokens) {
  const auto g = compile_regex("\\{\"k\": \"[^\"]{0,3}\"\\}");
  expect_mask_exact(*g, 0);
  expect_mask_exact(*g, g->walk(0, "{\"k\": \"é"));
  expect_mask_exact(*g, g->walk(0, "{\"k\": \"\xC3"));  // inside a two-byte character
}

TEST(Grammar, SpecialTokensAndPaddingAreNeverAllowed) {
  const auto g = compile_regex(".*");
  const std::span<const uint32_t> mask = g->mask(0);
  const int im_end = *testing::qwen3().token_to_id("<|im_end|>");
  EXPECT_FALSE(testing::allowed(mask, im_end));
  EXPECT_FALSE(testing::allowed(mask, testing::kModelVocab - 1));
  EXPECT_TRUE(testing::allowed(mask, testing::qwen3().encode("hello", false)[0]));
}

TEST(Grammar, EndOnlyWhenComplete) {
  const auto g = compile_regex("(yes|no)!");
  auto m = g->start();
  EXPECT_FALSE(m->can_end());
  for (int id : testing::qwen3().encode("yes", false)) m->accept(id);
  EXPECT_FALSE(m->can_end());
  m->accept(testing::qwen3().encode("!", false)[0]);
  EXPECT_TRUE(m->can_end());
  // Nothing may follow: the mask is empty and only EOS (added by the sampler) remains.
  for (uint32_t w : m->allowed_tokens()) EXPECT_EQ(w, 0u);
}

TEST(Grammar, DisallowedTokenEndsTheConstraint) {
  const auto g = compile_regex("[0-9]+");
  auto m = g->start();
  m->accept(testing::qwen3().encode("x", false)[0]);
  EXPECT_TRUE(m->can_end());
  EXPECT_TRUE(m->allowed_tokens().empty());
}

TEST(Grammar, ChoicesComeOutWhole) {
  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kChoice;
  spec.choices = {"positive", "negative", "neutral 😐", "a|b"};
  const auto g = testing::qwen3_compiler().compile(spec);
  std::mt19937 rng(3);
  std::set<std::string> seen;
  for (int i = 0; i < 60; ++i) {
    auto tokens = testing::random_walk(*g, rng, 100, 1.0);
    ASSERT_TRUE(tokens.has_value());
    const std::string text = testing::qwen3().decode(*tokens);
    EXPECT_TRUE(std::find(spec.choices.begin(), spec.choices.end(), text) != spec.choices.end()) << text;
    seen.insert(text);
  }
  EXPECT_EQ(seen.size(), spec.choices.size());
}

TEST(Grammar, RegexOutputsFullmatchInPython) {
  const std::string re = "[A-Z][a-z]{2,6} \\d{1,3}(\\.\\d)?(kg|g)";
  const auto g = compile_regex(re);
  std::mt19937 rng(11);
  std::vector<std::string> texts;
  for (int i = 0; i < 50; ++i) {
    auto tokens = testing::random_walk(*g, rng, 200, 0.5);
    ASSERT_TRUE(tokens.has_value());
    texts.push_back(testing::qwen3().decode(*tokens));
  }
  const std::vector<bool> ok = testing::python_fullmatch(re, texts);
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_TRUE(ok[i]) << texts[i];
}

// Forced calls (hermes markup) of n tools f0, f1, ... whose parameters are any object.
StructuredOutputSpec free_form_tools(int n) {
  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kToolCalls;
  spec.markup = {"<tool_call>\n", "\n</tool_call>", "", "arguments", "", ""};
  spec.tools = nlohmann::ordered_json::array();
  for (int i = 0; i < n; ++i) {
    spec.tools.push_back({{"type", "function"},
                          {"function", {{"name", "f" + std::to_string(i)},
                                        {"parameters", {{"type", "object"}}}}}});
  }
  return spec;
}

// Found by the server's fuzz campaign: 2,000 tools of {"type": "object"} under tool_choice
// "required" took 90 s of CPU before the automaton's state limit refused them. Their patterns'
// summed size is checked as they are made, so the refusal comes within a few tools of it.
TEST(Grammar, ManyToolsAreRefusedQuickly) {
  const StructuredOutputSpec spec = free_form_tools(2000);
  const auto start = std::chrono::steady_clock::now();
  try {
    testing::qwen3_compiler().compile(spec);
    ADD_FAILURE() << "2,000 free-form tools compiled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tools' parameter schemas"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// Tools whose parameters are any object (`{"type": "object"}`, common in agent frameworks)
// under tool_choice "required": one such tool took 35,209 automaton states and two were
// refused, before lists held one copy of their item and equivalent states were merged.
// Now forty compile, their arguments' states shared, and a call to each, with arguments
// nested four deep, is accepted.
TEST(Grammar, ManyFreeFormToolsCompile) {
  const StructuredOutputSpec spec = free_form_tools(40);
  const auto g = testing::qwen3_compiler().compile(spec);
  EXPECT_LT(g->dfa().num_states(), 1180 + 40 * 50);  // one object; the names, the markup
  for (int i : {0, 7, 39}) {
    const std::string call = "<tool_call>\n{\"name\":\"f" + std::to_string(i) +
                             "\",\"arguments\":{\"a\":[{\"b\":[1,\"x\"]}],\"c\":{}}}\n</tool_call>";
    EXPECT_TRUE(testing::dfa_accepts(g->dfa(), call)) << call;
  }
  // Five containers deep is past the free-form limit of four.
  EXPECT_FALSE(testing::dfa_accepts(
      g->dfa(), "<tool_call>\n{\"name\":\"f0\",\"arguments\":{\"a\":[[[[1]]]]}}\n</tool_call>"));
}

// Parameter schemas with "$defs" or "definitions" (Pydantic makes one for every enum and
// nested model) compile under forced calls: the call's schema nests the parameters under
// "arguments", so their "#/$defs/..." references must still find the definitions (session 31's
// server fuzzing: a 400 saying the reference named no schema).
TEST(Grammar, ToolParametersKeepTheirDefinitions) {
  for (const char* key : {"$defs", "definitions"}) {
    StructuredOutputSpec spec;
    spec.kind = StructuredOutputSpec::Kind::kToolCalls;
    spec.markup = {"<tool_call>\n", "\n</tool_call>", "", "arguments", "", ""};  // hermes
    nlohmann::ordered_json params = nlohmann::ordered_json::parse(R"({"type": "object",
        "properties": {"city": {"type": "string", "maxLength": 8}, "unit": {"$ref": "#/KEY/Unit"}},
        "required": ["city", "unit"], "additionalProperties": false})");
    params["properties"]["unit"]["$ref"] = fmt::format("#/{}/Unit", key);
    params[key] = {{"Unit", {{"enum", {"c", "f"}}}}};
    spec.tools = nlohmann::ordered_json::array(
        {{{"type", "function"}, {"function", {{"name", "weather"}, {"parameters", params}}}}});
    const auto g = testing::qwen3_compiler().compile(spec);
    EXPECT_TRUE(testing::dfa_accepts(
        g->dfa(), "<tool_call>\n{\"name\":\"weather\",\"arguments\":{\"city\":\"Oslo\",\"unit\":\"c\"}}\n</tool_call>"))
        << key;
    EXPECT_FALSE(testing::dfa_accepts(
        g->dfa(), "<tool_call>\n{\"name\":\"weather\",\"arguments\":{\"city\":\"Oslo\",\"unit\":\"k\"}}\n</tool_call>"))
        << key;
  }
}

// Forced tool calls (a chat's tool_choice "required"): one call or more, at most max_calls.
// Under max_calls 1 (parallel_tool_calls false) a finished call leaves nothing to sample
// but EOS, so no tokens go to a second call that the response would drop.
TEST(Grammar, ToolCallsUpToMaxCalls) {
  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kToolCalls;
  spec.markup = {"<tool_call>\n", "\n</tool_call>", "", "arguments", "", ""};  // hermes
  spec.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {
      "name": "f", "parameters": {"type": "object", "properties": {"x": {"enum": [1, 2]}},
      "required": ["x"], "additionalProperties": false}}}])");
  const std::string call = "<tool_call>\n{\"name\":\"f\",\"arguments\":{\"x\":1}}\n</tool_call>";
  auto accepts = [&](int max_calls, int calls) {
    spec.max_calls = max_calls;
    std::string text;
    for (int i = 0; i < calls; ++i) text += call;
    return testing::dfa_accepts(testing::qwen3_compiler().compile(spec)->dfa(), text);
  };
  for (int max_calls : {0, 1, 2}) {
    SCOPED_TRACE(max_calls);
    EXPECT_FALSE(accepts(max_calls, 0));
    EXPECT_TRUE(accepts(max_calls, 1));
    EXPECT_EQ(accepts(max_calls, 2), max_calls != 1);
    EXPECT_EQ(accepts(max_calls, 3), max_calls == 0);
  }

  // After one call: no token at all under max_calls 1 (the sampler adds EOS, as the call is
  // complete); without a limit, the next call's "<".
  const int open = testing::qwen3().encode("<", false)[0];
  for (int max_calls : {0, 1}) {
    SCOPED_TRACE(max_calls);
    spec.max_calls = max_calls;
    const auto g = testing::qwen3_compiler().compile(spec);
    const int32_t after = g->walk(g->dfa().start(), call);
    ASSERT_NE(after, ByteDfa::kDead);
    EXPECT_TRUE(g->dfa().accepting(after));
    EXPECT_EQ(testing::allowed(g->mask(after), open), max_calls == 0);
    EXPECT_EQ(g->any_allowed(after), max_calls == 0);
  }
}

// Mistral's markup: the whole list between "[TOOL_CALLS][" and "]", calls joined by ", ".
TEST(Grammar, ToolCallListBetweenItsPrefixAndSuffix) {
  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kToolCalls;
  spec.markup = {"", "", ", ", "arguments", "[TOOL_CALLS][", "]"};
  spec.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {
      "name": "f", "parameters": {"type": "object", "properties": {"x": {"enum": [1, 2]}},
      "required": ["x"], "additionalProperties": false}}}])");
  const std::string call = "{\"name\":\"f\",\"arguments\":{\"x\":1}}";
  auto accepts = [&](int max_calls, const std::string& text) {
    spec.max_calls = max_calls;
    return testing::dfa_accepts(testing::qwen3_compiler().compile(spec)->dfa(), text);
  };
  for (int max_calls : {0, 1}) {
    SCOPED_TRACE(max_calls);
    EXPECT_TRUE(accepts(max_calls, "[TOOL_CALLS][" + call + "]"));
    EXPECT_EQ(accepts(max_calls, "[TOOL_CALLS][" + call + ", " + call + "]"), max_calls == 0);
    EXPECT_FALSE(accepts(max_calls, "[TOOL_CALLS][]"));
    EXPECT_FALSE(accepts(max_calls, call));
    EXPECT_FALSE(accepts(max_calls, "[TOOL_CALLS][" + call));
  }
}

TEST(Grammar, CompilerCachesBySpec) {
  const auto a = compile_regex("abc|abd");
  const auto b = compile_regex("abc|abd");
  EXPECT_EQ(a.get(), b.get());
  EXPECT_NE(a.get(), compile_regex("abc").get());
}

}  // namespace
}  // namespace kestrel::structured
