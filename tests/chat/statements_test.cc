// Statements and scoping, each case compared with Python's jinja2 (HF settings).
#include "jinja_oracle.h"

namespace kestrel::chat_test {
namespace {

TEST(ChatStatements, IfAndForMatchJinja) {
  Json ctx = {{"items", {"a", "b", "c"}},
              {"nums", {3, 1, 4, 1, 5}},
              {"d", {{"z", 1}, {"a", 2}, {"m", 3}}},
              {"empty", Json::array()},
              {"pairs", {{1, "one"}, {2, "two"}}},
              {"n", 2}};
  expect_same_as_jinja2({
      {"if elif else", "{% for v in [0, 1, 2, 3] %}{% if v == 0 %}zero{% elif v == 1 %}one{% elif v == 2 %}two{% else %}many{% endif %},{% endfor %}", ctx},
      {"if on values", "{% if items %}A{% endif %}{% if empty %}B{% endif %}{% if none %}C{% endif %}{% if missing %}D{% endif %}{% if 0.0 %}E{% endif %}{% if d %}F{% endif %}", ctx},
      {"loop variables", "{% for x in items %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}", ctx},
      {"previtem nextitem", "{% for x in items %}[{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.previtem is defined }}]{% endfor %}", ctx},
      {"loop cycle", "{% for x in nums %}{{ loop.cycle('odd', 'even') }} {% endfor %}", ctx},
      {"for else", "{% for x in empty %}x{% else %}empty!{% endfor %}{% for x in items %}{{ x }}{% else %}never{% endfor %}", ctx},
      {"for if filter", "{% for x in nums if x > 1 %}{{ x }}@{{ loop.index }}/{{ loop.length }} {% endfor %}", ctx},
      {"for if filter all rejected", "{% for x in nums if x > 100 %}{{ x }}{% else %}none{% endfor %}", ctx},
      {"for over dict", "{% for k in d %}{{ k }}{% endfor %}", ctx},
      {"for over items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", ctx},
      {"for over items filter", "{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}", ctx},
      {"for over string", "{% for ch in 'héllo' %}[{{ ch }}]{% endfor %}", ctx},
      {"for over undefined", "{% for x in missing %}x{% else %}nothing{% endfor %}", ctx},
      {"tuple unpack", "{% for a, b in pairs %}{{ a }}:{{ b }} {% endfor %}", ctx},
      {"parenthesised unpack", "{% for (a, b) in pairs %}{{ b }}{% endfor %}", ctx},
      {"break continue", "{% for x in nums %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", ctx},
      {"nested loops", "{% for x in items %}{% for y in items %}{{ loop.index }}{% endfor %}{{ loop.index }}|{% endfor %}", ctx},
      {"loop over reversed slice", "{% for m in items[::-1] %}{{ m }}{{ loop.index0 }}{% endfor %}", ctx},
      {"unpack error", "{% for a, b in items %}{% endfor %}", ctx},
      {"loop over none", "{% for x in none %}{% endfor %}", ctx},
  });
}

TEST(ChatStatements, SetAndScopingMatchJinja) {
  Json ctx = {{"items", {1, 2, 3}}, {"messages", {{{"role", "system"}, {"content", "S"}}, {{"role", "user"}, {"content", "U"}}}}};
  expect_same_as_jinja2({
      {"set top level", "{% set x = 5 %}{{ x }}{% set x = x + 1 %}{{ x }}", ctx},
      {"set in loop does not leak", "{% set x = 0 %}{% for i in items %}{{ x }}{% set x = x + i %}{{ x }},{% endfor %}{{ x }}", ctx},
      {"set in loop before assignment", "{% for i in items %}[{{ y }}]{% set y = i %}{{ y }}{% endfor %}[{{ y }}]", ctx},
      {"set in if leaks", "{% if true %}{% set x = 1 %}{% endif %}{{ x }}", ctx},
      {"shadow context variable", "{% set messages = messages[1:] %}{{ messages|length }}{{ messages[0].role }}", ctx},
      {"tuple set", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c, d = [3, 4] %}{{ c + d }}", ctx},
      {"set tuple value", "{% set t = 1, 2 %}{{ t }}", ctx},
      {"namespace", "{% set ns = namespace(total=0, seen=[]) %}{% for i in items %}{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }} {{ ns.seen }}", ctx},
      {"namespace from dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}{{ ns.c is defined }}", ctx},
      {"namespace in nested loop", "{% set ns = namespace(found=false) %}{% for i in items %}{% for j in items %}{% if i * j == 6 %}{% set ns.found = true %}{% endif %}{% endfor %}{% endfor %}{{ ns.found }}", ctx},
      {"namespace print", "{% set ns = namespace(a=1, b='x') %}{{ ns }}", ctx},
      {"set attribute on non namespace", "{% set d = {} %}{% set d.x = 1 %}", ctx},
      {"block set", "{% set body %}\n  Hello {{ items|length }}\n{% endset %}[{{ body }}]", ctx},
      {"block set with filter", "{% set body | upper | trim %}  shout {{ 1 }}  {% endset %}[{{ body }}]", ctx},
      {"block set into namespace", "{% set ns = namespace(text='') %}{% for i in items %}{% set ns.text %}{{ ns.text }}<{{ i }}>{% endset %}{% endfor %}{{ ns.text }}", ctx},
      {"block set scope", "{% set y = 1 %}{% set body %}{% set y = 2 %}{{ y }}{% endset %}{{ body }}{{ y }}", ctx},
      {"with block", "{% with a = 1, b = 'x' %}{{ a }}{{ b }}{% endwith %}[{{ a }}]", ctx},
      {"with scope", "{% set a = 0 %}{% with a = a + 1 %}{% set c = 3 %}{{ a }}{{ c }}{% endwith %}{{ a }}[{{ c }}]", ctx},
      {"filter block", "{% filter upper %}hello {{ 'world' }}{% endfilter %}", ctx},
      {"filter block chain", "{% filter trim|replace('a', 'o') %}   banana   {% endfilter %}", ctx},
      {"generation tag", "{% generation %}assistant text{% endgeneration %}", ctx},
      {"print tag", "{% print 'printed' %}", ctx},
      {"set in loop with namespace fallback", "{% set ns = namespace(last=none) %}{% for m in messages %}{% set ns.last = m.role %}{% endfor %}{{ ns.last }}", ctx},
  });
}

// jinja2 resolves names when it compiles a template (idtracking), not by searching scopes at
// render time; these cases differ between the two approaches.
TEST(ChatStatements, StaticScopingMatchesJinja) {
  Json ctx = {{"x", "ctx"}, {"y", "Y"}};
  expect_same_as_jinja2({
      {"loop reads name the top level assigns later", "{% for i in [1] %}[{{ x }}]{% endfor %}{% set x = 1 %}{{ x }}", ctx},
      {"top level reads before its own assignment", "{{ x }}{% for i in [1] %}[{{ x }}]{% endfor %}{% set x = 1 %}{{ x }}", ctx},
      {"self assignment in loop, later top-level set", "{% for i in [1] %}{% set x = x %}[{{ x }}]{% endfor %}{% set x = 2 %}", ctx},
      {"self assignment in loop", "{% for i in [1, 2] %}{% set x = x ~ i %}[{{ x }}]{% endfor %}{{ x }}", ctx},
      {"nested loop reads outer loop's later assignment", "{% for i in [1, 2] %}{% for j in [1] %}[{{ x }}]{% endfor %}{% set x = i %}{% endfor %}", ctx},
      {"macro sees later top-level assignment", "{% macro m() %}[{{ x }}]{% endmacro %}{{ m() }}{% set x = 1 %}{{ m() }}", ctx},
      {"macro sees context", "{% macro m() %}[{{ y }}]{% endmacro %}{{ m() }}", ctx},
      {"store in some if branches", "{% if false %}{% set x = 1 %}{% endif %}{{ x }}{% for i in [1] %}{% if i == 2 %}{% set y = 2 %}{% endif %}{{ y }}{% endfor %}", ctx},
      {"store in all if branches", "{% for i in [1] %}{% if i %}{% set x = 'a' %}{% elif false %}{% set x = 'b' %}{% else %}{% set x = 'c' %}{% endif %}{{ x }}{% endfor %}", ctx},
      {"with reads later top-level assignment", "{% with %}[{{ x }}]{% set x = 2 %}{% endwith %}{% set x = 1 %}", ctx},
      {"block set sees enclosing loop variable", "{% for i in [1, 2] %}{% set b %}<{{ i }}{{ x }}>{% endset %}{{ b }}{% endfor %}", ctx},
      {"loop filter scope", "{% set t = 2 %}{% for i in [1, 2, 3] if i != t %}{{ i }}{% endfor %}", ctx},
      {"for else scope", "{% for i in [] %}{% else %}{% set z = 1 %}{{ z }}{{ x }}{% endfor %}[{{ z }}]", ctx},
      {"else runs after continue or break", "{% for i in [1, 2] %}{% continue %}{% else %}E{% endfor %}{% for i in [1, 2] %}{% break %}{% else %}F{% endfor %}{% for i in [1, 2] %}{% if i == 2 %}{% break %}{% endif %}{% else %}G{% endfor %}", ctx},
      {"generation tag scope", "{% generation %}{% set g = 1 %}{{ g }}{% endgeneration %}[{{ g }}]", ctx},
  });
}

TEST(ChatStatements, MacrosMatchJinja) {
  Json ctx = {{"g", "global"}, {"items", {1, 2}}};
  expect_same_as_jinja2({
      {"macro args and defaults", "{% macro m(a, b='x', c=none) %}[{{ a }}{{ b }}{{ c }}]{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(1, c=3) }}{{ m(a=4) }}", ctx},
      {"macro missing argument", "{% macro m(a, b) %}[{{ a }}|{{ b }}|{{ b is defined }}]{% endmacro %}{{ m(1) }}", ctx},
      {"macro default uses earlier arg", "{% macro m(a, b=a * 2) %}{{ a }}{{ b }}{% endmacro %}{{ m(3) }}", ctx},
      {"macro sees globals", "{% macro m() %}{{ g }}{% endmacro %}{{ m() }}", ctx},
      {"macro sees top level set", "{% set t = 'top' %}{% macro m() %}{{ t }}{% endmacro %}{{ m() }}", ctx},
      {"macro local set", "{% set v = 1 %}{% macro m() %}{% set v = 2 %}{{ v }}{% endmacro %}{{ m() }}{{ v }}", ctx},
      {"macro whitespace", "{% macro render(x) %}\n  <{{ x }}>\n{% endmacro %}\n{{ render(1) }}|{{ render(2) }}", ctx},
      {"macro varargs kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}", ctx},
      {"macro recursion", "{% macro count(n) %}{{ n }}{% if n > 0 %}{{ count(n - 1) }}{% endif %}{% endmacro %}{{ count(3) }}", ctx},
      {"macro in loop", "{% macro item(x) %}<{{ x }}>{% endmacro %}{% for i in items %}{{ item(i) }}{% endfor %}", ctx},
      {"call block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ g }}{% endcall %}", ctx},
      {"call block with args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(v) each(items) %}[{{ v }}]{% endcall %}", ctx},
      {"macro result is string", "{% macro m() %}5{% endmacro %}{{ m() ~ '!' }}{{ m() | length }}", ctx},
      {"macro too many arguments", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", ctx},
      {"macro unknown keyword", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=1) }}", ctx},
      {"caller without call block", "{% macro m() %}[{{ caller is defined }}]{% endmacro %}{{ m() }}", ctx},
  });
}

}  // namespace
}  // namespace kestrel::chat_test
