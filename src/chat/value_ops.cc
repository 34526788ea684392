#include "chat/value_ops.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "chat/builtins.h"
#include "chat/py_format.h"
#include "chat/utf8.h"

namespace kestrel::chat {

void fail_undefined(const Value& value) { throw EvalError{value.undefined_hint()}; }

std::string type_name(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return value.is_safe() ? "Markup" : "str";
    case Value::Kind::kList:
      return value.as_list().is_iterator ? "generator" : value.as_list().is_tuple ? "tuple" : "list";
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kNamespace: return "Namespace";
    case Value::Kind::kFunction: return "function";
  }
  return "object";
}

bool truthy(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return false;
    case Value::Kind::kBool: return value.as_bool();
    case Value::Kind::kInt: return value.as_int() != 0;
    case Value::Kind::kFloat: return value.as_float() != 0.0;
    case Value::Kind::kString: return !value.as_string().empty();
    case Value::Kind::kList: return value.as_list().is_iterator || !value.as_list().items.empty();
    case Value::Kind::kDict: return !value.as_dict().entries.empty();
    default: return true;
  }
}

std::string float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof(buf), std::fabs(value), std::chars_format::scientific);
  std::string sci(buf, result.ptr);
  size_t e_pos = sci.find('e');
  std::string digits;
  for (size_t i = 0; i < e_pos; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  int exponent = std::atoi(sci.c_str() + e_pos + 1);
  int decpt = exponent + 1;  // value = 0.<digits> * 10^decpt
  int ndigits = static_cast<int>(digits.size());
  std::string out = std::signbit(value) ? "-" : "";
  if (decpt <= -4 || decpt > 16) {  // Python's repr switches to exponent form here
    out += digits[0];
    if (ndigits > 1) {
      out += '.';
      out.append(digits, 1, std::string::npos);
    }
    int e = decpt - 1;
    out += fmt::format("e{}{:02d}", e < 0 ? '-' : '+', std::abs(e));
  } else if (decpt <= 0) {
    out += "0." + std::string(-decpt, '0') + digits;
  } else if (decpt >= ndigits) {
    out += digits + std::string(decpt - ndigits, '0') + ".0";
  } else {
    out += digits.substr(0, decpt) + "." + digits.substr(decpt);
  }
  return out;
}

std::string py_repr_string(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t pos = 0; pos < s.size();) {
    size_t start = pos;
    char32_t cp = utf8_next(s, pos);
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (py_is_printable(cp)) {
      out.append(s.substr(start, pos - start));
    } else if (cp < 0x100) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(cp));
    } else if (cp < 0x10000) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<unsigned>(cp));
    }
  }
  out += quote;
  return out;
}

std::string py_str(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined: return "";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return value.as_bool() ? "True" : "False";
    case Value::Kind::kInt: return std::to_string(value.as_int());
    case Value::Kind::kFloat: return float_repr(value.as_float());
    case Value::Kind::kString: return value.as_string();
    default: return py_repr(value);
  }
}

std::string py_repr(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kString:
      if (value.is_safe()) return "Markup(" + py_repr_string(value.as_string()) + ")";
      return py_repr_string(value.as_string());
    case Value::Kind::kList: {
      const ListData& list = value.as_list();
      if (list.is_iterator) return "<generator object>";
      std::string out = list.is_tuple ? "(" : "[";
      for (size_t i = 0; i < list.items.size(); ++i) {
        if (i > 0) out += ", ";
        out += py_repr(list.items[i]);
      }
      if (list.is_tuple && list.items.size() == 1) out += ",";
      return out + (list.is_tuple ? ")" : "]");
    }
    case Value::Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : value.as_dict().entries) {
        if (!first) out += ", ";
        first = false;
        out += py_repr(k) + ": " + py_repr(v);
      }
      return out + "}";
    }
    case Value::Kind::kNamespace: {
      std::string out = "<Namespace {";
      bool first = true;
      for (const auto& [k, v] : value.as_namespace().attrs) {
        if (!first) out += ", ";
        first = false;
        out += py_repr_string(k) + ": " + py_repr(v);
      }
      return out + "}>";
    }
    case Value::Kind::kFunction: return "<function " + value.as_function().name + ">";
    case Value::Kind::kUndefined: return "Undefined";
    default: return py_str(value);
  }
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const ListData& x = a.as_list();
      const ListData& y = b.as_list();
      if (x.is_iterator || y.is_iterator) return &x == &y;
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!values_equal(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const DictData& x = a.as_dict();
      const DictData& y = b.as_dict();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* other = y.find(k);
        if (other == nullptr || !values_equal(v, *other)) return false;
      }
      return true;
    }
    default: return a.identity() == b.identity();
  }
}

bool values_less(const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple &&
      !a.as_list().is_iterator && !b.as_list().is_iterator) {
    const ValueList& x = a.as_list().items;
    const ValueList& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!values_equal(x[i], y[i])) return values_less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  eval_fail("'<' not supported between instances of '{}' and '{}'", type_name(a), type_name(b));
}

ValueList iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return value.as_list().items;
    case Value::Kind::kDict: {
      ValueList keys;
      keys.reserve(value.as_dict().entries.size());
      for (const auto& entry : value.as_dict().entries) keys.push_back(entry.first);
      return keys;
    }
    case Value::Kind::kString: {
      ValueList chars;
      for (std::string& c : utf8_chars(value.as_string())) chars.push_back(Value::string(std::move(c)));
      return chars;
    }
    default: eval_fail("'{}' object is not iterable", type_name(value));
  }
}

int64_t length(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<int64_t>(utf8_length(value.as_string()));
    case Value::Kind::kList:
      if (value.as_list().is_iterator) break;
      return static_cast<int64_t>(value.as_list().items.size());
    case Value::Kind::kDict: return static_cast<int64_t>(value.as_dict().entries.size());
    default: break;
  }
  eval_fail("object of type '{}' has no len()", type_name(value));
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        eval_fail("'in <string>' requires string as left operand, not {}", type_name(item));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& x : container.as_list().items) {
        if (values_equal(x, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      if ((item.is_list() && !item.as_list().is_tuple) || item.is_dict()) {
        eval_fail("unhashable type: '{}'", type_name(item));
      }
      return container.as_dict().find(item) != nullptr;
    default: eval_fail("argument of type '{}' is not iterable", type_name(container));
  }
}

namespace {

std::string object_description(const Value& obj) {
  if (obj.is_none()) return "None";
  if (obj.is_namespace()) return "jinja2.utils.Namespace object";
  return type_name(obj) + " object";
}

Value missing_attribute(const Value& obj, std::string_view name) {
  return Value::undefined(
      fmt::format("{} has no attribute {}", py_repr_string(object_description(obj)), py_repr_string(name)));
}

}  // namespace

Value get_attr(const Value& obj, std::string_view name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (std::optional<Value> method = bind_method(obj, name)) return *method;
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(name)) return *v;
  } else if (obj.is_namespace()) {
    if (const Value* v = obj.as_namespace().find(name)) return *v;
  }
  return missing_attribute(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  bool int_key = key.is_int() || key.is_bool();
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(key)) return *v;
  } else if (obj.is_list() && !obj.as_list().is_iterator && int_key) {
    const ValueList& items = obj.as_list().items;
    int64_t i = key.as_int();
    if (i < 0) i += static_cast<int64_t>(items.size());
    if (i >= 0 && i < static_cast<int64_t>(items.size())) return items[i];
  } else if (obj.is_string() && int_key) {
    std::vector<std::string> chars = utf8_chars(obj.as_string());
    int64_t i = key.as_int();
    if (i < 0) i += static_cast<int64_t>(chars.size());
    if (i >= 0 && i < static_cast<int64_t>(chars.size())) return Value::string(chars[i], obj.is_safe());
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value::undefined(fmt::format("{} has no element {}", py_repr_string(object_description(obj)),
                                      py_repr(key)));
}

Value slice_value(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop,
                  std::optional<int64_t> step) {
  if (obj.is_undefined()) fail_undefined(obj);
  int64_t st = step.value_or(1);
  if (st == 0) eval_fail("slice step cannot be zero");
  bool is_string = obj.is_string();
  if (!is_string && !(obj.is_list() && !obj.as_list().is_iterator)) {
    return Value::undefined(fmt::format("{} has no element slice", py_repr_string(object_description(obj))));
  }
  std::vector<std::string> chars;
  if (is_string) chars = utf8_chars(obj.as_string());
  int64_t n = is_string ? static_cast<int64_t>(chars.size()) : static_cast<int64_t>(obj.as_list().items.size());
  auto adjust = [&](std::optional<int64_t> index, int64_t fallback) {
    if (!index) return fallback;
    int64_t i = *index;
    if (i < 0) {
      i += n;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= n) {
      i = st < 0 ? n - 1 : n;
    }
    return i;
  };
  int64_t begin = adjust(start, st < 0 ? n - 1 : 0);
  int64_t end = adjust(stop, st < 0 ? -1 : n);
  std::string out_string;
  ValueList out_items;
  for (int64_t i = begin; st > 0 ? i < end : i > end; i += st) {
    if (is_string) {
      out_string += chars[i];
    } else {
      out_items.push_back(obj.as_list().items[i]);
    }
  }
  if (is_string) return Value::string(std::move(out_string), obj.is_safe());
  return obj.as_list().is_tuple ? Value::tuple(std::move(out_items)) : Value::list(std::move(out_items));
}

}  // namespace kestrel::chat
