// after_reasoning (structured/after_reasoning.h): the masks and ends of each state, written
// by hand for a regex over a five-token vocabulary whose tokens 2 and 3 are the tags.
#include "structured/after_reasoning.h"

#include <gtest/gtest.h>

#include "structured_test_util.h"

namespace kestrel::structured {
namespace {

using testing::allowed;

constexpr int kA = 0, kB = 1, kOpen = 2, kClose = 3, kX = 4;

std::shared_ptr<const TokenConstraintFactory> gated(bool prompt_opens_thinking) {
  static GrammarCompiler compiler(std::make_shared<const VocabTrie>(
      std::vector<std::string>{"a", "b", "<think>", "</think>", "x"}, 5));
  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kRegex;
  spec.regex = "[ab]+";
  return after_reasoning(compiler.compile(spec), {kOpen, kClose}, 5, prompt_opens_thinking);
}

std::vector<int> allowed_ids(TokenConstraint& c) {
  std::vector<int> out;
  const auto mask = c.allowed_tokens();
  for (int id = 0; id < 5; ++id) {
    if (allowed(mask, id)) out.push_back(id);
  }
  return out;
}

TEST(AfterReasoning, ThinksFreelyThenAnswersUnderTheConstraint) {
  auto c = gated(false)->start();
  EXPECT_EQ(allowed_ids(*c), (std::vector<int>{kA, kB, kOpen}));  // the answer, or <think>
  EXPECT_FALSE(c->can_end());
  c->accept(kOpen);
  EXPECT_EQ(allowed_ids(*c), (std::vector<int>{kA, kB, kOpen, kClose, kX}));
  EXPECT_FALSE(c->can_end());  // thinking is not an answer
  c->accept(kX);
  c->accept(kOpen);  // another <think> inside the thinking changes nothing
  EXPECT_EQ(allowed_ids(*c).size(), 5u);
  c->accept(kClose);
  EXPECT_EQ(allowed_ids(*c), (std::vector<int>{kA, kB}));  // the regex from its start
  EXPECT_FALSE(c->can_end());
  c->accept(kA);
  EXPECT_TRUE(c->can_end());
  EXPECT_EQ(allowed_ids(*c), (std::vector<int>{kA, kB}));
}

TEST(AfterReasoning, AnAnswerWithoutThinkingIsConstrainedFromItsFirstToken) {
  auto c = gated(false)->start();
  c->accept(kB);
  EXPECT_TRUE(c->can_end());
  EXPECT_EQ(allowed_ids(*c), (std::vector<int>{kA, kB}));  // no <think> after the answer began
}

TEST(AfterReasoning, APromptThatOpenedThinkingStartsThinking) {
  const auto factory = gated(true);
  auto c = factory->start();
  EXPECT_EQ(allowed_ids(*c).size(), 5u);
  c->accept(kA);  // thinking text, not the answer
  EXPECT_EQ(allowed_ids(*c).size(), 5u);
  c->accept(kClose);
  EXPECT_EQ(allowed_ids(*c), (std::vector<int>{kA, kB}));
  // Each sample starts afresh.
  EXPECT_EQ(allowed_ids(*factory->start()).size(), 5u);
}

}  // namespace
}  // namespace kestrel::structured
