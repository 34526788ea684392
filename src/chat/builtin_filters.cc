// Filters on single values: text, numbers, JSON and HTML escaping.
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "chat/builtins.h"
#include "chat/limits.h"
#include "chat/py_format.h"
#include "chat/utf8.h"
#include "chat/value_ops.h"

namespace kestrel::chat {

namespace {

// soft_str: strings (and Markup) stay as they are, everything else goes through str().
Value soft_str(const Value& v) { return v.is_string() ? v : Value::string(py_str(v)); }

Value f_string(const Value& t, const CallArgs& a) {
  ArgReader("string", a, {});
  return soft_str(t);
}

Value f_upper(const Value& t, const CallArgs& a) {
  ArgReader("upper", a, {});
  return Value::string(py_upper(py_str(t)), t.is_safe());  // Markup methods return Markup
}

Value f_lower(const Value& t, const CallArgs& a) {
  ArgReader("lower", a, {});
  return Value::string(py_lower(py_str(t)), t.is_safe());  // Markup methods return Markup
}

Value f_capitalize(const Value& t, const CallArgs& a) {
  ArgReader("capitalize", a, {});
  return Value::string(py_capitalize(py_str(t)), t.is_safe());  // Markup methods return Markup
}

Value f_title(const Value& t, const CallArgs& a) {
  ArgReader("title", a, {});
  // jinja2 capitalises each piece after a run of "-", whitespace, "(", "{", "[" or "<".
  std::string s = py_str(t), out;
  bool at_word_start = true;
  for (size_t pos = 0; pos < s.size();) {
    size_t start = pos;
    char32_t cp = utf8_next(s, pos);
    bool separator = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || py_is_space(cp);
    if (separator) {
      out.append(s, start, pos - start);
      at_word_start = true;
      continue;
    }
    char32_t mapped = at_word_start ? py_to_upper(cp) : py_to_lower(cp);
    if (mapped == cp) out.append(s, start, pos - start);
    else utf8_append(out, mapped);
    at_word_start = false;
  }
  return Value::string(std::move(out));
}

Value f_trim(const Value& t, const CallArgs& a) {
  ArgReader args("trim", a, {"chars"});
  std::optional<std::string> chars = args.get_string(0);
  return Value::string(py_strip(py_str(t), chars ? &*chars : nullptr, true, true), t.is_safe());
}

Value f_replace(const Value& t, const CallArgs& a) {
  ArgReader args("replace", a, {"old", "new", "count"});
  if (!args.get(0) || !args.get(1)) eval_fail("replace() missing required arguments 'old' and 'new'");
  CallArgs call{{soft_str(*args.get(0)), soft_str(*args.get(1)), Value::integer(args.get_int(2, -1))}, {}};
  return (*bind_method(Value::string(py_str(t)), "replace")).as_function().fn(call);
}

Value f_indent(const Value& t, const CallArgs& a) {
  ArgReader args("indent", a, {"width", "first", "blank"});
  if (!t.is_string()) eval_fail("can only indent strings, not '{}'", type_name(t));
  std::string indentation;
  const Value* width = args.get(0);
  if (width != nullptr && width->is_string()) {
    indentation = width->as_string();
  } else {
    int64_t n = std::max<int64_t>(0, args.get_int(0, 4));
    check_string_size(static_cast<uint64_t>(n));
    indentation.assign(n, ' ');
  }
  bool first = args.get_bool(1, false), blank = args.get_bool(2, false);
  std::vector<std::string> lines = py_splitlines(t.as_string() + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    check_string_size(out.size(), 1 + indentation.size() + lines[i].size());
    if (i > 0) out += "\n";
    if (i > 0 && (blank || !lines[i].empty())) out += indentation;
    out += lines[i];
  }
  if (first) out = indentation + out;
  return Value::string(std::move(out), t.is_safe());
}

Value f_safe(const Value& t, const CallArgs& a) {
  ArgReader("safe", a, {});
  return Value::string(py_str(t), true);
}

Value f_escape(const Value& t, const CallArgs& a) {
  ArgReader("escape", a, {});
  if (t.is_string() && t.is_safe()) return t;
  return Value::string(html_escape(py_str(t)), true);
}

Value f_forceescape(const Value& t, const CallArgs& a) {
  ArgReader("forceescape", a, {});
  return Value::string(html_escape(py_str(t)), true);
}

Value f_length(const Value& t, const CallArgs& a) {
  ArgReader("length", a, {});
  return Value::integer(length(t));
}

Value f_default(const Value& t, const CallArgs& a) {
  ArgReader args("default", a, {"default_value", "boolean"});
  if (t.is_undefined() || (args.get_bool(1, false) && !truthy(t))) return args.get_or(0, Value::string(""));
  return t;
}

Value f_abs(const Value& t, const CallArgs& a) {
  ArgReader("abs", a, {});
  if (t.is_float()) return Value::number(std::fabs(t.as_float()));
  if (t.is_number()) return t.as_int() < 0 ? negate(t) : Value::integer(t.as_int());
  eval_fail("bad operand type for abs(): '{}'", type_name(t));
}

// Python's float(str): optional sign, digits with single underscores, inf/nan; else nullopt.
std::optional<double> parse_py_float(const std::string& text) {
  std::string s = py_strip(text, nullptr, true, true), clean;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '_') {
      bool between_digits = i > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
                            std::isdigit(static_cast<unsigned char>(s[i + 1]));
      if (!between_digits) return std::nullopt;
      continue;
    }
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '+' || c == '-')) return std::nullopt;
    clean += c;
  }
  std::string lower = py_lower(clean);
  size_t body = (!lower.empty() && (lower[0] == '+' || lower[0] == '-')) ? 1 : 0;
  std::string word = lower.substr(body);
  if (word == "inf" || word == "infinity" || word == "nan") return std::strtod(clean.c_str(), nullptr);
  if (word.empty() || word.find_first_not_of("0123456789.e+-") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return v;
}

// Python's int(str, base); nullopt when Python raises ValueError.
std::optional<int64_t> parse_py_int(const std::string& text, int base) {
  std::string s = py_strip(text, nullptr, true, true);
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  auto has_prefix = [&](char p) { return i + 1 < s.size() && s[i] == '0' && std::tolower(s[i + 1]) == p; };
  if ((base == 16 || base == 0) && has_prefix('x')) base = 16, i += 2;
  else if ((base == 8 || base == 0) && has_prefix('o')) base = 8, i += 2;
  else if ((base == 2 || base == 0) && has_prefix('b')) base = 2, i += 2;
  if (base == 0) base = 10;
  if (i >= s.size()) return std::nullopt;
  int64_t value = 0;
  bool last_underscore = true;
  for (; i < s.size(); ++i) {
    char c = static_cast<char>(std::tolower(static_cast<unsigned char>(s[i])));
    if (c == '_' && !last_underscore) {
      last_underscore = true;
      continue;
    }
    int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'z' ? c - 'a' + 10 : 99;
    if (digit >= base) return std::nullopt;
    if (__builtin_mul_overflow(value, base, &value) || __builtin_add_overflow(value, digit, &value)) {
      eval_fail("integer overflow (only 64-bit integers are supported)");
    }
    last_underscore = false;
  }
  if (last_underscore) return std::nullopt;
  return negative ? -value : value;
}

Value f_int(const Value& t, const CallArgs& a) {
  ArgReader args("int", a, {"default", "base"});
  Value fallback = args.get_or(0, Value::integer(0));
  int base = static_cast<int>(args.get_int(1, 10));
  if (t.is_undefined()) fail_undefined(t);  // int(Undefined) raises UndefinedError
  if (t.is_float()) {
    if (!std::isfinite(t.as_float())) eval_fail("cannot convert float infinity or NaN to integer");
    return Value::integer(static_cast<int64_t>(std::trunc(t.as_float())));
  }
  if (t.is_number()) return Value::integer(t.as_int());
  if (!t.is_string()) return fallback;
  if (std::optional<int64_t> v = parse_py_int(t.as_string(), base)) return Value::integer(*v);
  if (std::optional<double> f = parse_py_float(t.as_string())) {
    // Current jinja2 (3.1.6) returns the default for "inf"/"nan" too (it catches OverflowError).
    if (std::isfinite(*f)) return Value::integer(static_cast<int64_t>(std::trunc(*f)));
  }
  return fallback;
}

Value f_float(const Value& t, const CallArgs& a) {
  ArgReader args("float", a, {"default"});
  if (t.is_undefined()) fail_undefined(t);
  if (t.is_number()) return Value::number(t.as_float());
  if (t.is_string()) {
    if (std::optional<double> f = parse_py_float(t.as_string())) return Value::number(*f);
  }
  return args.get_or(0, Value::number(0.0));
}

double py_round(double x, int64_t digits) {
  if (!std::isfinite(x)) return x;
  if (digits >= 0) {
    // glibc prints the exact binary value rounded half-to-even, as Python's round() does.
    char buf[400];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::min<int64_t>(digits, 300)), x);
    return std::strtod(buf, nullptr);
  }
  double scale = std::pow(10.0, static_cast<double>(-digits));
  return std::nearbyint(x / scale) * scale;
}

Value f_round(const Value& t, const CallArgs& a) {
  ArgReader args("round", a, {"precision", "method"});
  int64_t precision = args.get_int(0, 0);
  std::string method = args.get_string(1).value_or("common");
  if (method != "common" && method != "ceil" && method != "floor") {
    eval_fail("method must be common, ceil or floor");
  }
  if (!t.is_number()) eval_fail("type {} doesn't define __round__ method", type_name(t));
  if (method == "common") {
    if (!t.is_float() && precision >= 0) return Value::integer(t.as_int());
    return Value::number(py_round(t.as_float(), precision));
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  double scaled = t.as_float() * scale;
  return Value::number((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
}

Value f_format(const Value& t, const CallArgs& a) {
  if (!a.args.empty() && !a.kwargs.empty()) eval_fail("can't handle positional and keyword arguments at the same time");
  Value args;
  if (!a.kwargs.empty()) {
    std::vector<std::pair<Value, Value>> entries;
    for (const auto& [k, v] : a.kwargs) entries.emplace_back(Value::string(k), v);
    args = Value::dict(std::move(entries));
  } else {
    args = Value::tuple(a.args);
  }
  return Value::string(percent_format(py_str(t), args));
}

// Hugging Face's tojson: json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
// sort_keys=sort_keys) -- no HTML escaping, unlike jinja2's own tojson.
Value f_tojson(const Value& t, const CallArgs& a) {
  ArgReader args("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions options;
  options.ensure_ascii = args.get_bool(0, false);
  if (const Value* indent = args.get(1); indent != nullptr && !indent->is_none()) {
    if (indent->is_string()) options.indent = indent->as_string();
    else {
      int64_t n = std::max<int64_t>(0, args.get_int(1, 0));
      check_string_size(static_cast<uint64_t>(n));
      options.indent = std::string(n, ' ');
    }
  }
  if (const Value* separators = args.get(2); separators != nullptr && !separators->is_none()) {
    ValueList parts = iterate(*separators);
    if (parts.size() != 2 || !parts[0].is_string() || !parts[1].is_string()) {
      eval_fail("tojson separators must be a pair of strings");
    }
    options.item_separator = parts[0].as_string();
    options.key_separator = parts[1].as_string();
  }
  options.sort_keys = args.get_bool(3, false);
  return Value::string(json_dumps(t, options));
}

struct NamedFilter {
  std::string_view name;
  FilterFn fn;
};

constexpr NamedFilter kFilters[] = {
    {"abs", f_abs},           {"capitalize", f_capitalize}, {"count", f_length},
    {"d", f_default},         {"default", f_default},       {"e", f_escape},
    {"escape", f_escape},     {"float", f_float},           {"forceescape", f_forceescape},
    {"format", f_format},     {"indent", f_indent},         {"int", f_int},
    {"length", f_length},     {"lower", f_lower},           {"replace", f_replace},
    {"round", f_round},       {"safe", f_safe},             {"string", f_string},
    {"title", f_title},       {"tojson", f_tojson},         {"trim", f_trim},
    {"upper", f_upper},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const NamedFilter& f : kFilters) {
    if (f.name == name) return f.fn;
  }
  return find_sequence_filter(name);
}

Value apply_filter(std::string_view name, const Value& target, const CallArgs& args) {
  FilterFn fn = find_filter(name);
  if (fn == nullptr) eval_fail("No filter named '{}'.", name);
  return fn(target, args);
}

}  // namespace kestrel::chat
