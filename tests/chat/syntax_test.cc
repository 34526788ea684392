// Lexing and expression syntax, each case compared with Python's jinja2 (HF settings).
#include "jinja_oracle.h"

namespace kestrel::chat_test {
namespace {

TEST(ChatSyntax, WhitespaceControlMatchesJinja) {
  Json ctx = {{"x", "X"}, {"items", {1, 2, 3}}};
  expect_same_as_jinja2({
      {"trim_blocks drops newline after %}", "{% if true %}\nA\n{% endif %}\nB\n", ctx},
      {"lstrip_blocks strips indent", "  {% if true %}\n    A\n  {% endif %}\nB", ctx},
      {"lstrip not for variables", "  {{ x }}\n  {% if true %}y{% endif %}", ctx},
      {"minus strips both sides", "a  \n  {%- if true -%}  \n  b  \n  {%- endif -%}\n  c", ctx},
      {"minus on variables", "a \n {{- x -}} \n b", ctx},
      {"plus disables lstrip", "  {%+ if true %}A{% endif %}", ctx},
      {"plus disables trim_blocks", "{% if true +%}\nA{% endif %}", ctx},
      {"comment trims newline", "a\n{# comment #}\nb", ctx},
      {"comment lstrip", "a\n   {# comment #}\nb", ctx},
      {"comment minus", "a   {#- c -#}   b", ctx},
      {"comment plus keeps newline", "a\n{# c +#}\nb", ctx},
      {"for loop lines", "{% for i in items %}\n  - {{ i }}\n{% endfor %}\n", ctx},
      {"nested indentation", "<\n  {%- for i in items %}\n    {%- if i > 1 %}\n      [{{ i }}]\n    {%- endif %}\n  {%- endfor %}\n>",
       ctx},
      {"trailing newline removed", "x\n", ctx},
      {"two trailing newlines", "x\n\n", ctx},
      {"crlf normalised", "a\r\n{% if true %}\r\nb\r\n{% endif %}\rc", ctx},
      {"tag after text on same line", "text {% if true %}\nA{% endif %}", ctx},
      {"lstrip after trimmed newline", "{% if true %}\n   {% if true %}A{% endif %}{% endif %}", ctx},
      {"lstrip after minus end", "{% if true -%}\n   {% if true %}A{% endif %}{% endif %}", ctx},
      {"tab indentation", "\t{% if true %}A{% endif %}\n\t\t{{ x }}", ctx},
      {"unicode space not a line start", "a\u00a0{% if true %}A{% endif %}", ctx},
      {"variable end then block lstrip", "{{ x }}   {% if true %}A{% endif %}", ctx},
      {"minus strips unicode whitespace", "a\u3000\u00a0{{- x }}", ctx},
      {"raw block", "{% raw %}{{ x }}{% if %}{% endraw %}", ctx},
      {"raw keeps newline after open", "{% raw %}\n  {{ x }}\n{% endraw %}\nafter", ctx},
      {"raw with minus", "a   {%- raw -%}   {{ x }}   {%- endraw -%}   b", ctx},
      {"raw endraw lstrip", "{% raw %}\n  text\n    {% endraw %}", ctx},
      {"empty template", "", ctx},
      {"only text", "plain text with { braces } and % and #", ctx},
      {"dict literal with nested braces", "{{ {'a': {'b': 1}} }}", ctx},
      {"comment opener at end of template", "text {{ x }} {#", ctx},
      {"raw opener at end of template", "text {% raw %}", ctx},
      {"tag delimiters in strings", "{{ '{{ x }}' }}{% if '%}' %}y{% endif %}", ctx},
  });
}

TEST(ChatSyntax, LiteralsMatchJinja) {
  expect_same_as_jinja2({
      {"strings and escapes", R"({{ 'a\'b' }}|{{ "a\"b" }}|{{ 'tab\there' }}|{{ 'nl\nx' }}|{{ '\x41\u00e9\U0001F600' }}|{{ '\d\q' }}|{{ '\101' }})"},
      {"adjacent strings join", "{{ 'a' 'b' \"c\" }}"},
      {"integers", "{{ 42 }} {{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 00 }}"},
      {"floats", "{{ 1.5 }} {{ 1e3 }} {{ 2.5E-3 }} {{ 1_0.2_5 }} {{ 0.1 }} {{ 100.0 }} {{ 1e16 }} {{ 1e15 }} {{ 1e-5 }} {{ 0.0001 }}"},
      {"constants", "{{ true }} {{ True }} {{ false }} {{ False }} {{ none }} {{ None }}"},
      {"lists tuples dicts", "{{ [1, 'a', none, true, 1.5] }} {{ (1,) }} {{ (1, 2) }} {{ () }} {{ {'a': 1, 'b': [2]} }} {{ [] }} {{ {} }}"},
      {"trailing commas", "{{ [1, 2,] }} {{ {'a': 1,} }} {{ (1, 2,) }}"},
      {"repr quoting", R"({{ ["it's", 'say "hi"', 'both \' and "', 'back\\slash', 'tab\t', 'ctl\x01\x7f'] }})"},
      {"repr unicode", "{{ ['é', '日本', '\u00a0', '\u200b', '😀'] }}"},
      {"print tuple", "{{ 1, 'a' }}"},
      {"dict key types", "{{ {1: 'a', 'b': 2, none: 3, true: 4} }}"},
      {"duplicate dict keys", "{{ {'a': 1, 'a': 2} }}"},
  });
}

TEST(ChatSyntax, OperatorsMatchJinja) {
  Json ctx = {{"n", 7}, {"f", 2.5}, {"s", "abc"}, {"l", {1, 2, 3}}, {"d", {{"k", "v"}}}};
  expect_same_as_jinja2({
      {"arithmetic", "{{ 7 + 2 }} {{ 7 - 2 }} {{ 7 * 2 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ 7 % 2 }} {{ 2 ** 10 }} {{ 4 / 2 }}", ctx},
      {"negative division", "{{ -7 // 2 }} {{ -7 % 3 }} {{ 7 // -2 }} {{ 7 % -3 }} {{ -7.5 // 2 }} {{ -7.5 % 2 }} {{ 7.5 % -2 }}", ctx},
      {"float arithmetic", "{{ 0.1 + 0.2 }} {{ 1 / 3 }} {{ 2 ** 0.5 }} {{ 2 ** -1 }} {{ f * 2 }} {{ 1e308 * 10 }} {{ -0.0 }} {{ 10 / 4 }}", ctx},
      {"power associativity", "{{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ (-2) ** 3 }}", ctx},
      {"unary", "{{ -n }} {{ +n }} {{ - -n }} {{ -f }} {{ -n|abs }}", ctx},
      {"bool arithmetic", "{{ true + 1 }} {{ true * 3 }} {{ false - 1 }}", ctx},
      {"string ops", "{{ 'a' + 'b' }} {{ 'ab' * 3 }} {{ 3 * 'x' }} {{ 'a' ~ 1 ~ none ~ true ~ 1.5 }} {{ s ~ undefined_var ~ '!' }}", ctx},
      {"list ops", "{{ [1] + [2] }} {{ [0] * 3 }} {{ (1,) + (2,) }}", ctx},
      {"comparisons", "{{ 1 < 2 }} {{ 2 <= 2 }} {{ 3 > 4 }} {{ 3 >= 3 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 'abc' < 'abd' }} {{ [1, 2] < [1, 3] }}", ctx},
      {"chained comparisons", "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 3 > 2 > 2 }} {{ 1 == 1 == 1 }}", ctx},
      {"equality across types", "{{ 1 == true }} {{ 0 == false }} {{ 'a' == 1 }} {{ [1] == (1,) }} {{ none == none }} {{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }}", ctx},
      {"in operator", "{{ 2 in l }} {{ 5 not in l }} {{ 'b' in s }} {{ 'k' in d }} {{ 'v' in d }} {{ 'x' in undefined_var }}", ctx},
      {"boolean logic", "{{ true and 'x' }} {{ 0 and 'x' }} {{ 0 or 'y' }} {{ 'z' or 0 }} {{ not 0 }} {{ not 'a' }} {{ none or [] }}", ctx},
      {"ternary", "{{ 'yes' if n > 5 else 'no' }} {{ 'yes' if n > 50 else 'no' }} [{{ 'only' if false }}] {{ 'a' if false else 'b' if true else 'c' }}", ctx},
      {"precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 * 3 ** 2 }} {{ 10 - 2 - 3 }} {{ 1 + 2 ~ 3 }} {{ not 1 == 2 }} {{ l|length - 1 }} {{ 1 + l|length }}", ctx},
      {"filter binds tighter than unary minus", "{{ -3|abs }} {{ -(3|abs) }}", ctx},
      {"test binds tighter than not", "{{ not n is odd }} {{ n is not odd }} {{ not undefined_var is defined }}", ctx},
      {"subscripts and slices", "{{ l[0] }} {{ l[-1] }} {{ l[1:] }} {{ l[:2] }} {{ l[::-1] }} {{ l[::2] }} {{ s[1] }} {{ s[::-1] }} {{ s[-2:] }} {{ s[5:] }}|{{ l[10] }}|", ctx},
      {"unicode slices", "{{ 'héllo wörld'[1:4] }} {{ 'héllo'[::-1] }} {{ 'héllo'|length }} {{ '日本語'[1] }}", ctx},
      {"attribute vs item", "{{ d.k }} {{ d['k'] }} {{ l.0 }} {{ d.missing }}|{{ d['missing'] }}|", ctx},
      {"method calls", "{{ s.upper() }} {{ d.get('k') }} {{ d.get('x', 'dflt') }} {{ 'a-b'.split('-') }}", ctx},
      {"percent with list and undefined", "{{ 'plain' % [1, 2] }} {{ 'plain' % missing }} {{ '%s|' % missing }}", ctx},
      {"empty subscript", "{{ l[] if false else 'ok' }}", ctx},
      {"percent formatting", "{{ '%s and %s' % ('a', 1) }} {{ '%d%%' % 50 }} {{ '%5.2f|%-4d|%04d|%x' % (3.14159, 7, 42, 255) }} {{ '%s' % none }} {{ '%r' % 'q' }}", ctx},
      {"str.format", "{{ '{} {}'.format('a', 2) }} {{ '{0}{1}{0}'.format('x', 'y') }} {{ '{name}!'.format(name='N') }} {{ '{:>5}|{:<5}|{:^5}|{:05d}|{:.3f}|{:,}'.format('r', 'l', 'c', 42, 3.14159, 1234567) }} {{ '{{}}'.format() }}", ctx},
  });
}

TEST(ChatSyntax, ErrorsMatchJinja) {
  Json ctx = {{"s", "abc"}, {"n", 1}, {"d", Json::object()}};
  expect_same_as_jinja2({
      {"unclosed block", "{% if true %}a", ctx},
      {"unknown tag", "{% frobnicate %}", ctx},
      {"unknown filter", "{{ 1|frobnicate }}", ctx},
      {"unknown test", "{{ 1 is frobnicate }}", ctx},
      {"bad expression", "{{ 1 + }}", ctx},
      {"unclosed string", "{{ 'abc }}", ctx},
      {"unbalanced paren", "{{ (1 }}", ctx},
      {"string plus int", "{{ 'a' + 1 }}", ctx},
      {"int plus string", "{{ 1 + 'a' }}", ctx},
      {"order mixed types", "{{ 1 < 'a' }}", ctx},
      {"attribute of undefined", "{{ missing.attr }}", ctx},
      {"item of undefined", "{{ missing['x'] }}", ctx},
      {"undefined arithmetic", "{{ missing + 1 }}", ctx},
      {"call undefined", "{{ missing() }}", ctx},
      {"nested missing attribute", "{{ d.a.b }}", ctx},
      {"division by zero", "{{ 1 / 0 }}", ctx},
      {"modulo by zero", "{{ 1 % 0 }}", ctx},
      {"not callable", "{{ s() }}", ctx},
      {"in with int container", "{{ 1 in 5 }}", ctx},
      {"int in string", "{{ 1 in 'abc' }}", ctx},
      {"iterate int", "{% for x in n %}{% endfor %}", ctx},
      {"unknown string method", "{{ s.nosuchmethod() }}", ctx},
      {"list append is unsafe", "{% set l = [1] %}{{ l.append(2) }}", ctx},
      {"dict update is unsafe", "{{ d.update({'a': 1}) }}", ctx},
      {"raise_exception", "{{ raise_exception('custom failure') }}", ctx},
      {"stray endif", "{% endif %}", ctx},
      {"missing endfor", "{% for x in [1] %}{{ x }}", ctx},
  });
}

}  // namespace
}  // namespace kestrel::chat_test
