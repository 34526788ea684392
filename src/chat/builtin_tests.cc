// Tests (`x is odd`) and globals (range, namespace, raise_exception, strftime_now, ...).
#include <ctime>

#include "chat/builtins.h"
#include "chat/limits.h"
#include "chat/utf8.h"
#include "chat/value_ops.h"

namespace kestrel::chat {

namespace {

const Value& require_arg(const char* test, const CallArgs& a) {
  if (a.args.empty()) eval_fail("test '{}' requires an argument", test);
  return a.args[0];
}

bool t_defined(const Value& v, const CallArgs&) { return !v.is_undefined(); }
bool t_undefined(const Value& v, const CallArgs&) { return v.is_undefined(); }
bool t_none(const Value& v, const CallArgs&) { return v.is_none(); }
bool t_boolean(const Value& v, const CallArgs&) { return v.is_bool(); }
bool t_true(const Value& v, const CallArgs&) { return v.is_bool() && v.as_bool(); }
bool t_false(const Value& v, const CallArgs&) { return v.is_bool() && !v.as_bool(); }
bool t_integer(const Value& v, const CallArgs&) { return v.is_int(); }
bool t_float(const Value& v, const CallArgs&) { return v.is_float(); }
bool t_number(const Value& v, const CallArgs&) { return v.is_number(); }
bool t_string(const Value& v, const CallArgs&) { return v.is_string(); }
bool t_mapping(const Value& v, const CallArgs&) { return v.is_dict(); }
bool t_callable(const Value& v, const CallArgs&) { return v.is_function(); }
bool t_escaped(const Value& v, const CallArgs&) { return v.is_string() && v.is_safe(); }

bool t_iterable(const Value& v, const CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}

bool t_sequence(const Value& v, const CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_dict() || (v.is_list() && !v.as_list().is_iterator);
}

bool t_lower(const Value& v, const CallArgs&) {
  std::string s = py_str(v);
  return py_lower(s) == s && py_upper(s) != s;
}

bool t_upper(const Value& v, const CallArgs&) {
  std::string s = py_str(v);
  return py_upper(s) == s && py_lower(s) != s;
}

bool remainder_is(const Value& v, const Value& divisor, int64_t expected) {
  return values_equal(binary_op(BinaryOp::kMod, v, divisor), Value::integer(expected));
}

bool t_odd(const Value& v, const CallArgs&) { return remainder_is(v, Value::integer(2), 1); }
bool t_even(const Value& v, const CallArgs&) { return remainder_is(v, Value::integer(2), 0); }
bool t_divisibleby(const Value& v, const CallArgs& a) { return remainder_is(v, require_arg("divisibleby", a), 0); }

bool t_eq(const Value& v, const CallArgs& a) { return values_equal(v, require_arg("eq", a)); }
bool t_ne(const Value& v, const CallArgs& a) { return !values_equal(v, require_arg("ne", a)); }
bool t_lt(const Value& v, const CallArgs& a) { return values_less(v, require_arg("lt", a)); }
bool t_gt(const Value& v, const CallArgs& a) { return values_less(require_arg("gt", a), v); }
bool t_le(const Value& v, const CallArgs& a) { return !values_less(require_arg("le", a), v); }
bool t_ge(const Value& v, const CallArgs& a) { return !values_less(v, require_arg("ge", a)); }
bool t_in(const Value& v, const CallArgs& a) { return contains(require_arg("in", a), v); }

bool t_sameas(const Value& v, const CallArgs& a) {
  const Value& other = require_arg("sameas", a);
  if (v.kind() != other.kind()) return false;
  switch (v.kind()) {
    case Value::Kind::kNone:
    case Value::Kind::kUndefined: return true;
    case Value::Kind::kBool: return v.as_bool() == other.as_bool();
    case Value::Kind::kInt:  // CPython caches the small ints
      return v.as_int() == other.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    default: return v.identity() != nullptr && v.identity() == other.identity();
  }
}

bool t_filter(const Value& v, const CallArgs&) { return v.is_string() && find_filter(v.as_string()) != nullptr; }
bool t_test(const Value& v, const CallArgs&) { return v.is_string() && find_test(v.as_string()) != nullptr; }

struct NamedTest {
  std::string_view name;
  TestFn fn;
  size_t max_args;
};

// max_args: the arguments after the tested value that jinja2's test function accepts.
constexpr NamedTest kTests[] = {
    {"boolean", t_boolean, 0},     {"callable", t_callable, 0},   {"defined", t_defined, 0},
    {"divisibleby", t_divisibleby, 1}, {"eq", t_eq, 1},           {"equalto", t_eq, 1},
    {"==", t_eq, 1},               {"escaped", t_escaped, 0},     {"even", t_even, 0},
    {"false", t_false, 0},         {"filter", t_filter, 0},       {"float", t_float, 0},
    {"ge", t_ge, 1},               {">=", t_ge, 1},               {"gt", t_gt, 1},
    {">", t_gt, 1},                {"greaterthan", t_gt, 1},      {"in", t_in, 1},
    {"integer", t_integer, 0},     {"iterable", t_iterable, 0},   {"le", t_le, 1},
    {"<=", t_le, 1},               {"lower", t_lower, 0},         {"lt", t_lt, 1},
    {"<", t_lt, 1},                {"lessthan", t_lt, 1},         {"mapping", t_mapping, 0},
    {"ne", t_ne, 1},               {"!=", t_ne, 1},               {"none", t_none, 0},
    {"number", t_number, 0},       {"odd", t_odd, 0},             {"sameas", t_sameas, 1},
    {"sequence", t_sequence, 0},   {"string", t_string, 0},       {"test", t_test, 0},
    {"true", t_true, 0},           {"undefined", t_undefined, 0}, {"upper", t_upper, 0},
};

// --- globals ---------------------------------------------------------------------------------

Value g_range(const CallArgs& a) {
  if (!a.kwargs.empty() || a.args.empty() || a.args.size() > 3) eval_fail("range expected 1 to 3 integer arguments");
  for (const Value& v : a.args) {
    if (!(v.is_int() || v.is_bool())) eval_fail("'{}' object cannot be interpreted as an integer", type_name(v));
  }
  int64_t start = 0, stop = 0, step = 1;
  if (a.args.size() == 1) {
    stop = a.args[0].as_int();
  } else {
    start = a.args[0].as_int();
    stop = a.args[1].as_int();
    if (a.args.size() == 3) step = a.args[2].as_int();
  }
  if (step == 0) eval_fail("range() arg 3 must not be zero");
  ValueList out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.size()) >= kMaxRange) {
      eval_fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).", kMaxRange);
    }
    out.push_back(Value::integer(i));
  }
  return Value::list(std::move(out));
}

std::vector<std::pair<Value, Value>> dict_entries(const CallArgs& a, const char* fn) {
  std::vector<std::pair<Value, Value>> entries;
  auto put = [&](const Value& k, const Value& v) {
    for (auto& e : entries) {
      if (values_equal(e.first, k)) {
        e.second = v;
        return;
      }
    }
    entries.emplace_back(k, v);
  };
  if (a.args.size() > 1) eval_fail("{} expected at most 1 argument, got {}", fn, a.args.size());
  if (!a.args.empty()) {
    const Value& src = a.args[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.as_dict().entries) put(k, v);
    } else {
      for (const Value& pair : iterate(src)) {
        ValueList kv = iterate(pair);
        if (kv.size() != 2) eval_fail("dictionary update sequence element has length {}; 2 is required", kv.size());
        put(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [k, v] : a.kwargs) put(Value::string(k), v);
  return entries;
}

Value g_dict(const CallArgs& a) { return Value::dict(dict_entries(a, "dict")); }

Value g_namespace(const CallArgs& a) {
  Value ns = Value::new_namespace();
  for (auto& [k, v] : dict_entries(a, "namespace")) {
    if (!k.is_string()) eval_fail("namespace attribute names must be strings");
    ns.as_namespace().set(k.as_string(), v);
  }
  return ns;
}

Value g_raise_exception(const CallArgs& a) {
  std::string message = a.args.empty() ? "" : py_str(a.args[0]);
  throw EvalError{message, true};
}

Value g_strftime_now(const CallArgs& a) {
  if (a.args.size() != 1 || !a.args[0].is_string()) eval_fail("strftime_now() takes one format string");
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[512];
  size_t n = std::strftime(buf, sizeof(buf), a.args[0].as_string().c_str(), &local);
  return Value::string(std::string(buf, n));
}

}  // namespace

TestFn find_test(std::string_view name) {
  for (const NamedTest& t : kTests) {
    if (t.name == name) return t.fn;
  }
  return nullptr;
}

bool apply_test(std::string_view name, const Value& target, const CallArgs& args) {
  for (const NamedTest& t : kTests) {
    if (t.name != name) continue;
    if (args.args.size() > t.max_args || !args.kwargs.empty()) {
      eval_fail("test '{}' takes {} argument(s) ({} given)", name, t.max_args, args.args.size() + args.kwargs.size());
    }
    return t.fn(target, args);
  }
  eval_fail("No test named '{}'.", name);
}

std::optional<Value> find_global(std::string_view name) {
  if (name == "range") return Value::function("range", g_range);
  if (name == "dict") return Value::function("dict", g_dict);
  if (name == "namespace") return Value::function("namespace", g_namespace);
  if (name == "raise_exception") return Value::function("raise_exception", g_raise_exception);
  if (name == "strftime_now") return Value::function("strftime_now", g_strftime_now);
  return std::nullopt;
}

}  // namespace kestrel::chat
