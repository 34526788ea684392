#include "chat/py_format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "chat/limits.h"
#include "chat/utf8.h"
#include "chat/value_ops.h"

namespace kestrel::chat {

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Format specs: [[fill]align][sign][#][0][width][,|_][.precision][type]

namespace {

struct Spec {
  std::string fill = " ";
  char align = 0;
  char sign = '-';
  bool alternate = false;
  bool zero = false;
  int width = -1;
  char grouping = 0;
  int precision = -1;
  char type = 0;
};

bool is_align(char c) { return c == '<' || c == '>' || c == '=' || c == '^'; }

int parse_number(std::string_view spec, size_t& i) {
  int n = 0;
  while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9') n = n * 10 + (spec[i++] - '0');
  return n;
}

Spec parse_spec(std::string_view spec) {
  Spec s;
  size_t i = 0;
  size_t after_first = 0;
  if (!spec.empty()) utf8_next(spec, after_first);
  if (after_first < spec.size() && is_align(spec[after_first])) {
    s.fill = std::string(spec.substr(0, after_first));
    s.align = spec[after_first];
    i = after_first + 1;
  } else if (!spec.empty() && is_align(spec[0])) {
    s.align = spec[0];
    i = 1;
  }
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) s.sign = spec[i++];
  if (i < spec.size() && spec[i] == '#') {
    s.alternate = true;
    ++i;
  }
  if (i < spec.size() && spec[i] == '0') {
    s.zero = true;
    ++i;
  }
  if (i < spec.size() && spec[i] >= '0' && spec[i] <= '9') s.width = parse_number(spec, i);
  if (i < spec.size() && (spec[i] == ',' || spec[i] == '_')) s.grouping = spec[i++];
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    if (i >= spec.size() || spec[i] < '0' || spec[i] > '9') eval_fail("Format specifier missing precision");
    s.precision = parse_number(spec, i);
  }
  if (i < spec.size()) s.type = spec[i++];
  if (i != spec.size()) eval_fail("Invalid format specifier '{}'", spec);
  if (s.zero && s.align == 0) {
    s.fill.assign(1, '0');
    s.align = '=';
  }
  return s;
}

std::string group_digits(const std::string& digits, char sep) {
  std::string out;
  int count = 0;
  for (size_t i = digits.size(); i-- > 0;) {
    if (count > 0 && count % 3 == 0) out += sep;
    out += digits[i];
    ++count;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::string pad(const std::string& prefix, const std::string& body, const Spec& spec, char default_align) {
  int64_t len = static_cast<int64_t>(utf8_length(prefix) + utf8_length(body));
  int64_t missing = spec.width - len;
  if (missing <= 0) return prefix + body;
  check_string_size(static_cast<size_t>(missing) * spec.fill.size(), prefix.size() + body.size());
  auto fill = [&](int64_t n) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += spec.fill;
    return out;
  };
  switch (spec.align ? spec.align : default_align) {
    case '<': return prefix + body + fill(missing);
    case '^': return fill(missing / 2) + prefix + body + fill(missing - missing / 2);
    case '=': return prefix + fill(missing) + body;
    default: return fill(missing) + prefix + body;
  }
}

std::string sign_prefix(bool negative, const Spec& spec) {
  if (negative) return "-";
  if (spec.sign == '+') return "+";
  if (spec.sign == ' ') return " ";
  return "";
}

std::string format_float(double v, Spec spec) {
  char type = spec.type;
  bool no_type = type == 0;
  if (no_type && spec.precision < 0) return pad(sign_prefix(std::signbit(v), spec), float_repr(std::fabs(v)), spec, '>');
  double magnitude = std::fabs(v);
  std::string suffix;
  if (type == '%') {
    magnitude *= 100;
    type = 'f';
    suffix = "%";
  }
  if (no_type || type == 'n') type = 'g';
  int precision = spec.precision < 0 ? 6 : spec.precision;
  std::string c_format = std::string("%") + (spec.alternate ? "#" : "") + ".*" + type;
  char buf[512];
  std::snprintf(buf, sizeof(buf), c_format.c_str(), precision, magnitude);
  std::string body = buf;
  if (no_type && std::isfinite(magnitude) && body.find_first_of(".e") == std::string::npos) body += ".0";
  if (spec.grouping) {
    size_t end = body.find_first_not_of("0123456789");
    if (end == std::string::npos) end = body.size();
    body = group_digits(body.substr(0, end), spec.grouping) + body.substr(end);
  }
  return pad(sign_prefix(std::signbit(v), spec), body + suffix, spec, '>');
}

std::string format_int(int64_t v, const Spec& spec) {
  switch (spec.type) {
    case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': case '%':
      return format_float(static_cast<double>(v), spec);
    default: break;
  }
  if (spec.precision >= 0) eval_fail("Precision not allowed in integer format specifier");
  uint64_t magnitude = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  std::string body, prefix;
  switch (spec.type) {
    case 0: case 'd': case 'n': body = std::to_string(magnitude); break;
    case 'x': body = fmt::format("{:x}", magnitude); prefix = "0x"; break;
    case 'X': body = fmt::format("{:X}", magnitude); prefix = "0X"; break;
    case 'o': body = fmt::format("{:o}", magnitude); prefix = "0o"; break;
    case 'b': body = fmt::format("{:b}", magnitude); prefix = "0b"; break;
    case 'c': {
      std::string out;
      utf8_append(out, static_cast<char32_t>(v));
      return pad("", out, spec, '<');
    }
    default: eval_fail("Unknown format code '{}' for object of type 'int'", spec.type);
  }
  if (spec.grouping) body = group_digits(body, spec.grouping);
  return pad(sign_prefix(v < 0, spec) + (spec.alternate ? prefix : ""), body, spec, '>');
}

std::string format_string(const std::string& s, const Spec& spec) {
  if (spec.type != 0 && spec.type != 's') {
    eval_fail("Unknown format code '{}' for object of type 'str'", spec.type);
  }
  std::string body = s;
  if (spec.precision >= 0) {
    std::vector<size_t> offsets = utf8_offsets(s);
    if (static_cast<size_t>(spec.precision) < offsets.size() - 1) body = s.substr(0, offsets[spec.precision]);
  }
  return pad("", body, spec, '<');
}

}  // namespace

std::string format_with_spec(const Value& value, std::string_view spec_text) {
  if (spec_text.empty()) return py_str(value);
  Spec spec = parse_spec(spec_text);
  switch (value.kind()) {
    case Value::Kind::kString: return format_string(value.as_string(), spec);
    case Value::Kind::kBool:
    case Value::Kind::kInt: return format_int(value.as_int(), spec);
    case Value::Kind::kFloat: return format_float(value.as_float(), spec);
    default: eval_fail("unsupported format string passed to {}.__format__", type_name(value));
  }
}

// ---------------------------------------------------------------------------------------------
// printf-style `%`

std::string percent_format(std::string_view format, const Value& args) {
  ValueList positional;
  const DictData* mapping = nullptr;
  if (args.is_list() && args.as_list().is_tuple) {
    positional = args.as_list().items;
  } else {
    positional.push_back(args);
    if (args.is_dict()) mapping = &args.as_dict();
  }
  // Python treats any non-tuple argument with __getitem__ (dict, list) as a mapping and then
  // does not complain about unused arguments.
  bool mapping_like = args.is_dict() || args.is_undefined() ||
                      (args.is_list() && !args.as_list().is_tuple && !args.as_list().is_iterator);
  size_t next_arg = 0;
  bool used_mapping = false;
  auto take = [&]() -> const Value& {
    if (next_arg >= positional.size()) eval_fail("not enough arguments for format string");
    return positional[next_arg++];
  };
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) eval_fail("incomplete format");
    const Value* named = nullptr;
    if (format[i] == '(') {
      size_t close = format.find(')', i);
      if (close == std::string_view::npos || mapping == nullptr) eval_fail("format requires a mapping");
      named = mapping->find(format.substr(i + 1, close - i - 1));
      if (named == nullptr) eval_fail("KeyError: {}", py_repr_string(format.substr(i + 1, close - i - 1)));
      used_mapping = true;
      i = close + 1;
    }
    Spec spec;
    for (; i < format.size() && std::string_view("-+ #0").find(format[i]) != std::string_view::npos; ++i) {
      switch (format[i]) {
        case '-': spec.align = '<'; break;
        case '+': spec.sign = '+'; break;
        case ' ': if (spec.sign != '+') spec.sign = ' '; break;
        case '#': spec.alternate = true; break;
        case '0': spec.zero = true; break;
      }
    }
    if (i < format.size() && format[i] == '*') {
      spec.width = static_cast<int>(take().as_int());
      ++i;
    } else if (i < format.size() && format[i] >= '0' && format[i] <= '9') {
      spec.width = parse_number(format, i);
    }
    if (i < format.size() && format[i] == '.') {
      ++i;
      if (i < format.size() && format[i] == '*') {
        spec.precision = static_cast<int>(take().as_int());
        ++i;
      } else {
        spec.precision = parse_number(format, i);
      }
    }
    while (i < format.size() && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L')) ++i;
    if (i >= format.size()) eval_fail("incomplete format");
    char type = format[i];
    if (type == '%') {
      out += '%';
      continue;
    }
    const Value& arg = named != nullptr ? *named : take();
    if (spec.align == 0) spec.align = '>';
    if (type == 's' || type == 'r' || type == 'a') {
      spec.type = 0;
      out += format_string(type == 's' ? py_str(arg) : py_repr(arg), spec);
      continue;
    }
    if (spec.zero && spec.align == '>') {
      spec.fill.assign(1, '0');
      spec.align = '=';
    }
    if (type == 'd' || type == 'i' || type == 'u') {
      if (!arg.is_number()) eval_fail("%{} format: a real number is required, not {}", type, type_name(arg));
      int64_t v = arg.is_float() ? static_cast<int64_t>(std::trunc(arg.as_float())) : arg.as_int();
      spec.precision = -1;
      out += format_int(v, spec);
    } else if (type == 'x' || type == 'X' || type == 'o' || type == 'c') {
      if (!(arg.is_int() || arg.is_bool())) eval_fail("%{} format: an integer is required, not {}", type, type_name(arg));
      spec.type = type;
      spec.precision = -1;
      out += format_int(arg.as_int(), spec);
    } else if (std::string_view("eEfFgG").find(type) != std::string_view::npos) {
      if (!arg.is_number()) eval_fail("must be real number, not {}", type_name(arg));
      spec.type = type;
      out += format_float(arg.as_float(), spec);
    } else {
      eval_fail("unsupported format character '{}'", type);
    }
  }
  if (!used_mapping && !mapping_like && next_arg < positional.size()) {
    eval_fail("not all arguments converted during string formatting");
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// str.format

std::string str_format(std::string_view format, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') ++i;
      else eval_fail("Single '}}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    size_t close = format.find('}', i);
    if (close == std::string_view::npos) eval_fail("Single '{{' encountered in format string");
    std::string_view field = format.substr(i + 1, close - i - 1);
    i = close;
    std::string_view spec, conversion;
    if (size_t colon = field.find(':'); colon != std::string_view::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    if (size_t bang = field.find('!'); bang != std::string_view::npos) {
      conversion = field.substr(bang + 1);
      field = field.substr(0, bang);
    }
    size_t name_end = std::min(field.find('.'), field.find('['));
    std::string_view name = field.substr(0, std::min(name_end, field.size()));
    Value value;
    if (name.empty()) {
      if (auto_index >= args.args.size()) eval_fail("Replacement index {} out of range", auto_index);
      value = args.args[auto_index++];
    } else if (name.find_first_not_of("0123456789") == std::string_view::npos) {
      size_t index = std::stoul(std::string(name));
      if (index >= args.args.size()) eval_fail("Replacement index {} out of range", index);
      value = args.args[index];
    } else {
      auto it = std::find_if(args.kwargs.begin(), args.kwargs.end(),
                             [&](const auto& kw) { return kw.first == name; });
      if (it == args.kwargs.end()) eval_fail("KeyError: {}", py_repr_string(name));
      value = it->second;
    }
    for (size_t p = name.size(); p < field.size();) {  // .attr and [key] chains
      if (field[p] == '.') {
        size_t end = std::min(field.find('.', p + 1), field.find('[', p + 1));
        end = std::min(end, field.size());
        value = get_attr(value, field.substr(p + 1, end - p - 1));
        p = end;
      } else {
        size_t end = field.find(']', p);
        if (end == std::string_view::npos) eval_fail("Missing ']' in format string");
        std::string_view key = field.substr(p + 1, end - p - 1);
        bool numeric = !key.empty() && key.find_first_not_of("0123456789") == std::string_view::npos;
        value = get_item(value, numeric ? Value::integer(std::stoll(std::string(key))) : Value::string(std::string(key)));
        p = end + 1;
      }
    }
    if (conversion == "r" || conversion == "a") {
      value = Value::string(py_repr(value));
    } else if (conversion == "s") {
      value = Value::string(py_str(value));
    } else if (!conversion.empty()) {
      eval_fail("Unknown conversion specifier {}", conversion);
    }
    out += format_with_spec(value, spec);
  }
  return out;
}

}  // namespace kestrel::chat
