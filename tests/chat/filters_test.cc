// Filters, tests and Python methods, each case compared with Python's jinja2 (HF settings).
#include "jinja_oracle.h"

namespace kestrel::chat_test {
namespace {

Json filter_context() {
  return {{"s", "  Hello World  "},
          {"words", {"banana", "Apple", "cherry", "apple"}},
          {"nums", {3, -1, 4, 1.5, 5}},
          {"users", {{{"name", "bob"}, {"age", 30}, {"tags", {"x"}}},
                     {{"name", "Alice"}, {"age", 25}},
                     {{"name", "carol"}, {"age", 30}, {"active", true}}}},
          {"d", {{"b", 2}, {"a", 1}, {"C", 3}}},
          {"tool", {{"name", "get_weather"},
                    {"description", "Weather for a city, in °C — \"quoted\" <tag> & more"},
                    {"parameters", {{"type", "object"},
                                    {"properties", {{"city", {{"type", "string"}}}, {"days", {{"type", "integer"}}}}},
                                    {"required", {"city"}}}},
                    {"score", 0.5},
                    {"big", 12345678901},
                    {"flags", {true, false, nullptr}},
                    {"empty_list", Json::array()},
                    {"empty_obj", Json::object()}}},
          {"text", "line one\nline two\n\nline four"},
          {"html", "<a href=\"x\">Tom & Jerry's</a>"}};
}

TEST(ChatFilters, TextFiltersMatchJinja) {
  Json ctx = filter_context();
  expect_same_as_jinja2({
      {"trim", "[{{ s|trim }}][{{ 'xxhixx'|trim('x') }}][{{ '\t\n a \u00a0'|trim }}][{{ 5|trim }}]", ctx},
      {"case", "{{ s|upper }}|{{ s|lower }}|{{ 'hELLO wORLD'|capitalize }}|{{ 'hello big-world (x)[y] <z>'|title }}|{{ \"they're bill's\"|title }}", ctx},
      {"unicode case", "{{ 'éàü straße'|upper }}|{{ 'ÉÀÜ'|lower }}|{{ 'élan vital'|title }}|{{ 'ΑΒΓ абв'|lower }}{{ 'αβγ АБВ'|upper }}", ctx},
      {"replace", "{{ 'a-b-c'|replace('-', '+') }} {{ 'a-b-c'|replace('-', '', 1) }} {{ 123|replace('2', 'x') }} {{ 'ab'|replace('', '.') }}", ctx},
      {"length count", "{{ s|length }} {{ words|count }} {{ d|length }} {{ 'héllo'|length }} {{ missing|length }}", ctx},
      {"default", "{{ missing|default('dflt') }} {{ missing|d('d2') }} {{ none|default('x') }} {{ ''|default('empty', true) }} {{ 0|default(7, boolean=true) }} {{ 'set'|default('x') }} [{{ missing|default }}]", ctx},
      {"string int float", "{{ 42|string }} {{ '42'|int + 1 }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(-1) }} {{ ' 12 '|int }} {{ '0x1A'|int(base=16) }} {{ '1_000'|int }} {{ 3.9|int }} {{ true|int }} {{ '2.5'|float }} {{ 2|float }} {{ 'nan?'|float }} {{ '1e3'|float }} {{ none|int }}", ctx},
      {"abs round", "{{ -3|abs }} {{ -2.5|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 7|round }} {{ 3.14159|round(3) }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(method='floor') }} {{ -0.5|round }}", ctx},
      {"indent", "[{{ text|indent }}]\n[{{ text|indent(2, true) }}]\n[{{ text|indent(2, blank=true) }}]\n[{{ text|indent('> ', first=true) }}]\n[{{ 'end\n'|indent }}]", ctx},
      {"escape", "{{ html|e }} {{ html|escape }} {{ html|safe }} {{ (html|e)|e }} {{ 5|e }} {{ none|e }}", ctx},
      {"markup concatenation", "{{ ('<b>'|safe) + '<i>' }} {{ '<i>' + ('<b>'|safe) }} {{ ('<'|e) + '<' }} {{ ('<'|e) ~ '<' }}", ctx},
      {"markup results", "{{ [('<a>'|e).upper(), ('<a>'|e)|upper, ('<a>'|e)|title, ('<a>'|e)|trim, ('x<'|e)[0], ('x<'|e)[1:], ('ab'|e)|reverse, ('a b'|safe).split(), 2 * ('a'|safe)] }}", ctx},
      {"markup methods escape arguments", "{{ ('<p>'|safe).replace('p', '<b>') }} {{ ('{} <i>'|safe).format('<x>') }} {{ ('|'|safe).join(['<', '>']) }}", ctx},
      {"format filter", "{{ '%s-%s'|format('a', 'b') }} {{ '%(x)s!'|format(x=1) }} {{ '%.2f'|format(3.14159) }}", ctx},
      {"wordwrap-free title of mixed", "{{ 'a1b2 c3'|title }} {{ 'ABC def'|capitalize }}", ctx},
  });
}

TEST(ChatFilters, SequenceFiltersMatchJinja) {
  Json ctx = filter_context();
  expect_same_as_jinja2({
      {"join", "{{ words|join(', ') }}|{{ nums|join }}|{{ users|join('/', attribute='name') }}|{{ d|join(',') }}", ctx},
      {"first last", "{{ words|first }} {{ words|last }} {{ 'abc'|first }} {{ 'abc'|last }} {{ d|first }} [{{ []|first }}] {{ users|first|tojson }}", ctx},
      {"list", "{{ 'abc'|list }} {{ d|list }} {{ words|list }} {{ missing|list }}", ctx},
      {"reverse", "{{ 'abc'|reverse }} {{ words|reverse|list }} {{ words|reverse|join(',') }} {{ words|select|reverse|list }}", ctx},
      {"sort", "{{ words|sort }} {{ words|sort(case_sensitive=true) }} {{ words|sort(reverse=true) }} {{ nums|sort }} {{ users|sort(attribute='name')|map(attribute='name')|list }}", ctx},
      {"sort multi attribute", "{{ users|sort(attribute='age,name')|map(attribute='name')|join(',') }} {{ users|sort(attribute='age', reverse=true)|map(attribute='name')|join(',') }}", ctx},
      {"dictsort", "{{ d|dictsort }} {{ d|dictsort(true) }} {{ d|dictsort(by='value') }} {{ d|dictsort(reverse=true) }}", ctx},
      {"unique", "{{ words|unique|list }} {{ words|unique(case_sensitive=true)|list }} {{ [1, 2, 1, 3, 2]|unique|list }} {{ users|unique(attribute='age')|map(attribute='name')|list }}", ctx},
      {"min max sum", "{{ nums|min }} {{ nums|max }} {{ nums|sum }} {{ words|min }} {{ words|max }} {{ users|sum(attribute='age') }} {{ users|max(attribute='age')|tojson }} {{ []|sum }}", ctx},
      {"map", "{{ users|map(attribute='name')|list }} {{ words|map('upper')|join(' ') }} {{ users|map(attribute='active', default='no')|list }} {{ nums|map('int')|list }} {{ words|map('replace', 'a', '4')|list }}", ctx},
      {"select reject", "{{ nums|select('>', 2)|list }} {{ nums|reject('>', 2)|list }} {{ [0, 1, '', 'x', none]|select|list }} {{ [1, 2, 3, 4]|select('even')|list }} {{ [1, 2, 3]|reject('odd')|list }} {{ words|select('in', ['Apple', 'x'])|list }}", ctx},
      {"selectattr rejectattr", "{{ users|selectattr('active')|map(attribute='name')|list }} {{ users|rejectattr('active')|map(attribute='name')|list }} {{ users|selectattr('age', 'equalto', 30)|map(attribute='name')|list }} {{ users|selectattr('name', 'eq', 'bob')|list|length }} {{ users|selectattr('tags', 'defined')|list|length }}", ctx},
      {"generators are truthy", "{% if []|select %}T{% else %}F{% endif %}{% if [1]|map('string') %}T{% endif %}{% if {}|items %}T{% endif %}", ctx},
      {"generator has no length", "{{ [1]|select|length }}", ctx},
      {"items", "{{ d|items|list }} {{ missing|items|list }}", ctx},
      {"attr", "{{ d|attr('keys') is defined }} {{ d|attr('b') is defined }}", ctx},
  });
}

TEST(ChatFilters, TojsonMatchesHuggingFace) {
  Json ctx = filter_context();
  ctx["unicode"] = "日本語 é \u0001 \u007f tab\t nl\n quote\" back\\ emoji 😀";
  ctx["floats"] = {0.1, 1.0, 1e-7, 1e20, 123456789.125, -0.0, 3.0};
  expect_same_as_jinja2({
      {"tojson default", "{{ tool|tojson }}", ctx},
      {"tojson indent", "{{ tool|tojson(indent=4) }}", ctx},
      {"tojson indent 2 and nested empties", "{{ {'a': [], 'b': {}, 'c': [[]], 'd': [{}]}|tojson(indent=2) }}", ctx},
      {"tojson indent 0 and string indent", "{{ [1, [2]]|tojson(indent=0) }}|{{ {'k': [1]}|tojson(indent='\t') }}", ctx},
      {"tojson separators", "{{ tool.parameters|tojson(separators=(',', ':')) }} {{ [1, 2]|tojson(indent=2, separators=(',', ' = ')) }}", ctx},
      {"tojson sort_keys", "{{ d|tojson(sort_keys=true) }} {{ tool|tojson(sort_keys=true, indent=1) }}", ctx},
      {"tojson ensure_ascii", "{{ unicode|tojson }} {{ unicode|tojson(ensure_ascii=true) }}", ctx},
      {"tojson scalars", "{{ none|tojson }} {{ true|tojson }} {{ 1|tojson }} {{ 'x'|tojson }} {{ floats|tojson }} {{ (1, 'a')|tojson }}", ctx},
      {"tojson non-string keys", "{{ {1: 'a', 2.5: 'b', true: 'c', none: 'd'}|tojson }}", ctx},
      {"tojson undefined fails", "{{ missing|tojson }}", ctx},
      {"tojson generator fails", "{{ [1]|select|tojson }}", ctx},
      {"tojson of loop items", "{% for t in [tool] %}{{ t|tojson }}{% endfor %}", ctx},
  });
}

TEST(ChatFilters, TestsMatchJinja) {
  Json ctx = filter_context();
  expect_same_as_jinja2({
      {"defined", "{{ s is defined }} {{ missing is defined }} {{ missing is undefined }} {{ d.a is defined }} {{ d.zz is defined }} {{ d['zz'] is undefined }}", ctx},
      {"none and booleans", "{{ none is none }} {{ 0 is none }} {{ true is boolean }} {{ 1 is boolean }} {{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }}", ctx},
      {"numbers", "{{ 1 is number }} {{ 1.5 is number }} {{ true is number }} {{ 's' is number }} {{ 1 is integer }} {{ true is integer }} {{ 1.0 is integer }} {{ 1.0 is float }} {{ 1 is float }}", ctx},
      {"strings mappings sequences", "{{ s is string }} {{ 1 is string }} {{ d is mapping }} {{ words is mapping }} {{ words is sequence }} {{ s is sequence }} {{ d is sequence }} {{ 1 is sequence }} {{ missing is sequence }}", ctx},
      {"iterable", "{{ words is iterable }} {{ s is iterable }} {{ d is iterable }} {{ 1 is iterable }} {{ none is iterable }} {{ missing is iterable }} {{ words|select is iterable }}", ctx},
      {"odd even divisibleby", "{{ 3 is odd }} {{ 3 is even }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ -3 is odd }} {{ 2.0 is even }}", ctx},
      {"comparison tests", "{{ 1 is eq 1 }} {{ 1 is equalto 2 }} {{ 1 is == 1 }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} {{ 2 is gt 1 }} {{ 2 is ge 2 }} {{ 2 is le 1 }} {{ 2 is greaterthan 1 }} {{ 1 is lessthan 1 }}", ctx},
      {"in test", "{{ 'a' is in 'abc' }} {{ 1 is in [1, 2] }} {{ 'x' is in d }}", ctx},
      {"lower upper", "{{ 'abc' is lower }} {{ 'aBc' is lower }} {{ 'ABC' is upper }} {{ '123' is upper }}", ctx},
      {"sameas callable escaped", "{{ none is sameas none }} {{ true is sameas true }} {{ 1 is sameas true }} {{ d.get is callable }} {{ s is callable }} {{ (s|e) is escaped }} {{ s is escaped }}", ctx},
      {"filter test names", "{{ 'upper' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }}", ctx},
      {"is not", "{{ missing is not defined }} {{ 1 is not none }} {{ 3 is not divisibleby 2 }}", ctx},
      {"odd of string fails", "{{ 'a' is odd }}", ctx},
      {"test with too many arguments", "{{ 'abc' is lower 'x' }}", ctx},
      {"int of undefined fails", "{{ missing|int }}", ctx},
      {"sort keys compare equal without ordering", "{{ [1, 2]|map(attribute='x')|list|sort }}", ctx},
      {"unhashable in dict", "{{ {'a': 1} in {'b': 2} }}", ctx},
  });
}

TEST(ChatFilters, MethodsMatchPython) {
  Json ctx = filter_context();
  expect_same_as_jinja2({
      {"startswith endswith", "{{ s.startswith('  He') }} {{ s.endswith('d  ') }} {{ 'abc'.startswith(('x', 'a')) }} {{ 'abc'.startswith('b', 1) }} {{ 'abc'.endswith('b', 0, 2) }}", ctx},
      {"strip family", "[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}][{{ 'xyhixy'.strip('xy') }}][{{ '\n\nx\n'.lstrip('\n') }}]", ctx},
      {"split", "{{ s.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ 'a b  c '.split(None, 1) }} {{ ''.split() }} {{ ''.split(',') }} {{ 'x</think>y</think>z'.split('</think>') }}", ctx},
      {"rsplit", "{{ 'a,b,c'.rsplit(',', 1) }} {{ ' a b c '.rsplit(None, 1) }} {{ 'a--b--c'.rsplit('--') }}", ctx},
      {"split indexing", "{{ 'x</think>y'.split('</think>')[-1] }} {{ 'a<think>b'.split('<think>')[0] }}", ctx},
      {"case methods", "{{ 'hello world'.title() }} {{ \"it's 3rd\".title() }} {{ 'HELLO'.lower() }} {{ 'hi'.upper() }} {{ 'hELLO'.capitalize() }}", ctx},
      {"replace find count", "{{ 'aaa'.replace('a', 'b', 2) }} {{ 'héllo'.find('l') }} {{ 'hello'.find('z') }} {{ 'hello'.rfind('l') }} {{ 'banana'.count('an') }} {{ 'banana'.count('') }} {{ 'hello'.index('e') }}", ctx},
      {"format method", "{{ 'Hi {}, you are {}'.format('Bob', 30) }} {{ '{0[name]}'.format({'name': 'N'}) }} {{ '{:8.3f}|{:+d}|{:x}|{:>6}|{!r}'.format(2.5, 5, 255, 'ab', 'q') }}", ctx},
      {"join and misc", "{{ '-'.join(['a', 'b']) }} {{ 'a\nb\r\nc'.splitlines() }} {{ 'key=value=x'.partition('=') }} {{ 'abc'.removeprefix('a') }} {{ '  '.isspace() }} {{ '123'.isdigit() }} {{ 'abc'.isalpha() }}", ctx},
      {"dict methods", "{{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }} {{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 0) }} {{ d.copy() }}", ctx},
      {"dict attribute precedence", "{{ {'items': 1}['items'] }} {{ {'name': 'n'}.name }} {{ {'keys': 2}.keys()|list }}", ctx},
      {"list methods", "{{ words.index('cherry') }} {{ [1, 2, 1].count(1) }}", ctx},
      {"globals", "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1, b=2) }} {{ namespace(x=1).x }}", ctx},
  });
}

}  // namespace
}  // namespace kestrel::chat_test
