// Resource limits on untrusted templates (src/chat/limits.h): runaway recursion, allocation
// and loops fail fast with a TemplateError instead of crashing or exhausting the host.
#include <chrono>

#include "chat/limits.h"
#include "jinja_oracle.h"

namespace kestrel::chat_test {
namespace {

// Renders `tmpl`, expecting a TemplateError whose message contains `part` within a second.
void expect_limit_error(const std::string& tmpl, const std::string& part) {
  const auto start = std::chrono::steady_clock::now();
  try {
    std::string out = ChatTemplate::parse(tmpl).render(Json::object());
    ADD_FAILURE() << "expected a TemplateError from: " << tmpl << " (rendered " << out.size()
                  << " bytes)";
  } catch (const TemplateError& e) {
    EXPECT_NE(e.message().find(part), std::string::npos) << tmpl << ": " << e.message();
    EXPECT_FALSE(e.raised_by_template());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 1.0) << tmpl;
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
