// Resource limits on untrusted templates (src/chat/limits.h): runaway recursion, allocation
// and loops fail fast with a TemplateError instead of crashing or exhausting the host.
#include <string>

#include "chat/limits.h"
#include "jinja_oracle.h"

namespace kestrel::chat_test {
namespace {

// Renders `tmpl`, expecting a TemplateError whose message contains `part`. (How fast it
// fails is not timed here: the limits bound the work by counting it, not by a clock.)
void expect_limit_error(const std::string& tmpl, const std::string& part) {
  try {
    std::string out = ChatTemplate::parse(tmpl).render(Json::object());
    ADD_FAILURE() << "expected a TemplateError from: " << tmpl.substr(0, 200) << " (rendered "
                  << out.size() << " bytes)";
  } catch (const TemplateError& e) {
    EXPECT_NE(e.message().find(part), std::string::npos) << tmpl.substr(0, 200) << ": " << e.message();
    EXPECT_FALSE(e.raised_by_template());
  }
}

std::string repeat(const std::string& piece, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += piece;
  return out;
}

// Source nesting deep enough to overflow the stack (the server crashed on 20,000 levels of
// parentheses) is a parse error; so is an operator chain whose tree would be as deep.
TEST(ChatLimits, DeepSourceNestingIsAnError) {
  const int n = 20000;
  expect_limit_error("{{ " + repeat("(", n) + "1" + repeat(")", n) + " }}", "nested too deeply");
  expect_limit_error("{{ " + repeat("[", n) + repeat("]", n) + " }}", "nested too deeply");
  expect_limit_error("{{ " + repeat("not ", n) + "1 }}", "nested too deeply");
  expect_limit_error("{{ " + repeat("- ", n) + "1 }}", "nested too deeply");
  expect_limit_error(repeat("{% if true %}", n) + "x" + repeat("{% endif %}", n), "nested too deeply");
  expect_limit_error("{{ 1" + repeat(" + 1", n) + " }}", "nested too deeply");
  expect_limit_error("{{ x" + repeat(".a", n) + " }}", "nested too deeply");
  expect_limit_error("{{ 'a'" + repeat("|upper", n) + " }}", "nested too deeply");
  // Chains inside brackets inside chains: the tree's depth counts, not each chain's length.
  std::string nested = "1";
  for (int i = 0; i < 50; ++i) nested = "(" + nested + repeat(" + 1", 40) + ")";
  expect_limit_error("{{ " + nested + " }}", "nested too deeply");
  std::string calls = "1";
  for (int i = 0; i < 50; ++i) calls = "dict(a=" + calls + repeat(" + 1", 40) + ")";
  expect_limit_error("{{ " + calls + " }}", "nested too deeply");
}

TEST(ChatLimits, ModerateNestingStillRenders) {
  auto render = [](const std::string& tmpl) { return ChatTemplate::parse(tmpl).render(Json::object()); };
  EXPECT_EQ(render("{{ " + repeat("(", 100) + "1" + repeat(")", 100) + " }}"), "1");
  EXPECT_EQ(render("{{ 0" + repeat(" + 1", 500) + " }}"), "500");
  EXPECT_EQ(render(repeat("{% if true %}", 100) + "x" + repeat("{% endif %}", 100)), "x");
  EXPECT_EQ(render("{{ " + repeat("not ", 100) + "false }}"), "False");
}

TEST(ChatLimits, UnboundedMacroRecursionIsAnError) {
  expect_limit_error("{% macro f(n) %}{{ f(n+1) }}{% endmacro %}{{ f(0) }}",
                     "maximum recursion depth");
  // Through a call block's caller as well.
  expect_limit_error(
      "{% macro g() %}{% if caller %}{% endif %}{% call g() %}x{% endcall %}{% endmacro %}{{ g() }}",
      "maximum recursion depth");
}

TEST(ChatLimits, LegalRecursionStillWorks) {
  auto render = [](const std::string& tmpl) { return ChatTemplate::parse(tmpl).render(Json::object()); };
  EXPECT_EQ(render("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{{ n }},{% endmacro %}{{ f(5) }}"),
            "0,1,2,3,4,5,");
  std::string deep = render(
      "{% macro f(n) %}{% if n < 50 %}{{ f(n + 1) }}{% else %}{{ n }}{% endif %}{% endmacro %}{{ f(0) }}");
  EXPECT_EQ(deep, "50");
  // Right at the limit: kMaxCallDepth nested calls are allowed, one more is not.
  std::string at_limit = "{% macro f(n) %}{% if n > 1 %}{{ f(n - 1) }}{% else %}ok{% endif %}{% endmacro %}{{ f(" +
                         std::to_string(chat::kMaxCallDepth) + ") }}";
  EXPECT_EQ(render(at_limit), "ok");
  std::string over = "{% macro f(n) %}{% if n > 1 %}{{ f(n - 1) }}{% else %}ok{% endif %}{% endmacro %}{{ f(" +
                     std::to_string(chat::kMaxCallDepth + 1) + ") }}";
  expect_limit_error(over, "maximum recursion depth");
  // Sequential calls do not add up to depth.
  EXPECT_EQ(render("{% macro f() %}.{% endmacro %}{% for i in range(1000) %}{{ f() }}{% endfor %}"),
            std::string(1000, '.'));
}

TEST(ChatLimits, HugeRepetitionFailsBeforeAllocating) {
  expect_limit_error("{{ [1] * 9223372036854775807 }}", "sequence too long");
  expect_limit_error("{{ 9223372036854775807 * [1] }}", "sequence too long");
  expect_limit_error("{{ 'x' * 9223372036854775807 }}", "string too long");
  expect_limit_error("{{ 'xy' * 4611686018427387904 }}", "string too long");  // 2 * 2**62 wraps
  expect_limit_error("{{ 'x' * 100000000 }}", "string too long");
  // Small repetitions are unchanged.
  EXPECT_EQ(ChatTemplate::parse("{{ 'ab' * 3 }}{{ [1, 2] * 2 }}{{ 'x' * -1 }}{{ (1,) * 0 }}").render(Json::object()),
            "ababab[1, 2, 1, 2]()");
}

TEST(ChatLimits, GrowingStringsAndOutputAreCapped) {
  // Doubling by concatenation, ~, join and the output itself.
  expect_limit_error(
      "{% set ns = namespace(s='x' * 1048576) %}{% for i in range(10) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
      "string too long");
  expect_limit_error(
      "{% set ns = namespace(s='x' * 1048576) %}{% for i in range(10) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
      "string too long");
  expect_limit_error("{{ ([('x' * 1048576)] * 40) | join('') }}", "string too long");
  expect_limit_error("{{ ''.join([('x' * 1048576)] * 40) }}", "string too long");
  expect_limit_error("{% for i in range(40) %}{{ 'x' * 1048576 }}{% endfor %}", "rendered output");
  expect_limit_error("{{ '{:>2000000000}'.format('x') }}", "string too long");
  expect_limit_error("{{ 'a\nb' | indent(4000000000) }}", "string too long");
}

TEST(ChatLimits, RangeAndLoopsAreBounded) {
  expect_limit_error("{{ range(9223372036854775807) | length }}", "Range too big");
  expect_limit_error(
      "{% for i in range(10000) %}{% for j in range(10000) %}x{% endfor %}{% endfor %}",
      "too long");
  expect_limit_error(
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "too long");
  expect_limit_error(
      "{% macro f() %}{% endmacro %}{% for i in range(100000) %}{% for j in range(100) %}{{ f() }}{% endfor %}{% endfor %}",
      "too long");
  // A large but reasonable loop is fine.
  std::string out = ChatTemplate::parse(
                        "{% for i in range(1000) %}{% for j in range(100) %}x{% endfor %}{% endfor %}")
                        .render(Json::object());
  EXPECT_EQ(out.size(), 100000u);
}

}  // namespace
}  // namespace kestrel::chat_test
