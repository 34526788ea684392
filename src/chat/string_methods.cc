// Python's str methods on template strings.
#include "chat/string_methods.h"

#include <algorithm>
#include <array>

#include "chat/builtins.h"
#include "chat/limits.h"
#include "chat/py_format.h"
#include "chat/utf8.h"
#include "chat/value_ops.h"

namespace kestrel::chat {

namespace {

// Byte range of s[start:end] with Python's index rules (code point indices, negatives count
// from the end, out-of-range values clamp).
std::pair<size_t, size_t> byte_range(const std::string& s, const ArgReader& args, size_t start_param) {
  std::vector<size_t> offsets = utf8_offsets(s);
  int64_t n = static_cast<int64_t>(offsets.size()) - 1;
  auto clamp = [&](const Value* v, int64_t fallback) {
    if (v == nullptr || v->is_none()) return fallback;
    int64_t i = v->as_int();
    if (i < 0) i = std::max<int64_t>(0, i + n);
    return std::min(i, n);
  };
  int64_t begin = clamp(args.get(start_param), 0);
  int64_t end = std::max(begin, clamp(args.get(start_param + 1), n));
  return {offsets[begin], offsets[end]};
}

std::string require_string(const Value& v, const char* what) {
  if (!v.is_string()) eval_fail("{} must be str, not {}", what, type_name(v));
  return v.as_string();
}

Value string_list(std::vector<std::string> parts) {
  ValueList items;
  items.reserve(parts.size());
  for (std::string& p : parts) items.push_back(Value::string(std::move(p)));
  return Value::list(std::move(items));
}

std::vector<std::string> split_whitespace(const std::string& s, int64_t maxsplit, bool from_right) {
  std::vector<std::string> chars = utf8_chars(s);
  auto is_space = [&](size_t i) {
    size_t pos = 0;
    return py_is_space(utf8_next(chars[i], pos));
  };
  std::vector<std::string> parts;
  int64_t n = static_cast<int64_t>(chars.size());
  auto join = [&](int64_t a, int64_t b) {
    std::string out;
    for (int64_t i = a; i < b; ++i) out += chars[i];
    return out;
  };
  if (!from_right) {
    int64_t i = 0;
    while (true) {
      while (i < n && is_space(i)) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(join(i, n));
        break;
      }
      int64_t j = i;
      while (j < n && !is_space(j)) ++j;
      parts.push_back(join(i, j));
      i = j;
    }
    return parts;
  }
  int64_t i = n;
  while (true) {
    while (i > 0 && is_space(i - 1)) --i;
    if (i <= 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      parts.push_back(join(0, i));
      break;
    }
    int64_t j = i;
    while (j > 0 && !is_space(j - 1)) --j;
    parts.push_back(join(j, i));
    i = j;
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> split_on(const std::string& s, const std::string& sep, int64_t maxsplit, bool from_right) {
  if (sep.empty()) eval_fail("empty separator");
  std::vector<std::string> parts;
  if (!from_right) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      size_t hit = s.find(sep, start);
      if (hit == std::string::npos) break;
      parts.push_back(s.substr(start, hit - start));
      start = hit + sep.size();
    }
    parts.push_back(s.substr(start));
    return parts;
  }
  size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    if (end < sep.size()) break;
    size_t hit = s.rfind(sep, end - sep.size());
    if (hit == std::string::npos) break;
    parts.push_back(s.substr(hit + sep.size(), end - hit - sep.size()));
    end = hit;
  }
  parts.push_back(s.substr(0, end));
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::string replace_all(const std::string& s, const std::string& old, const std::string& replacement, int64_t count) {
  std::string out;
  int64_t done = 0;
  if (old.empty()) {  // Python inserts the replacement around every code point
    std::vector<std::string> chars = utf8_chars(s);
    for (const std::string& c : chars) {
      if (count < 0 || done < count) {
        out += replacement;
        ++done;
      }
      out += c;
    }
    if (count < 0 || done < count) out += replacement;
    return out;
  }
  size_t start = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(old, start);
    if (hit == std::string::npos) break;
    out += s.substr(start, hit - start) + replacement;
    start = hit + old.size();
    ++done;
  }
  return out + s.substr(start);
}

bool affix_matches(const std::string& s, const Value& affix, const ArgReader& args, bool suffix) {
  auto [begin, end] = byte_range(s, args, 1);
  std::string_view range(s.data() + begin, end - begin);
  ValueList candidates = affix.is_list() && affix.as_list().is_tuple ? affix.as_list().items : ValueList{affix};
  for (const Value& c : candidates) {
    std::string text = require_string(c, suffix ? "endswith arg" : "startswith arg");
    if (text.size() > range.size()) continue;
    if (suffix ? range.substr(range.size() - text.size()) == text : range.substr(0, text.size()) == text) return true;
  }
  return false;
}

template <typename Pred>
bool all_chars(const std::string& s, Pred pred) {
  if (s.empty()) return false;
  for (size_t pos = 0; pos < s.size();) {
    if (!pred(utf8_next(s, pos))) return false;
  }
  return true;
}

bool is_alpha(char32_t c) { return (c < 0x80 && std::isalpha(static_cast<int>(c))) || (c >= 0x80 && py_is_cased(c)); }
bool is_digit(char32_t c) { return c >= '0' && c <= '9'; }

Value call_plain_method(const Value& self, std::string_view name, const CallArgs& call) {
  const std::string& s = self.as_string();
  std::string fn = "str." + std::string(name);
  if (name == "format") return Value::string(str_format(s, call));
  if (name == "startswith" || name == "endswith") {
    ArgReader args(fn, call, {"prefix", "start", "end"});
    if (!args.get(0)) eval_fail("{}() takes at least 1 argument (0 given)", fn);
    return Value::boolean(affix_matches(s, *args.get(0), args, name == "endswith"));
  }
  if (name == "split" || name == "rsplit") {
    ArgReader args(fn, call, {"sep", "maxsplit"});
    int64_t maxsplit = args.get_int(1, -1);
    std::optional<std::string> sep = args.get_string(0);
    bool right = name == "rsplit";
    return string_list(sep ? split_on(s, *sep, maxsplit, right) : split_whitespace(s, maxsplit, right));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    ArgReader args(fn, call, {"chars"});
    std::optional<std::string> chars = args.get_string(0);
    return Value::string(py_strip(s, chars ? &*chars : nullptr, name != "rstrip", name != "lstrip"));
  }
  if (name == "replace") {
    ArgReader args(fn, call, {"old", "new", "count"});
    if (!args.get(0) || !args.get(1)) eval_fail("replace expected at least 2 arguments");
    return Value::string(replace_all(s, require_string(*args.get(0), "replace() argument 1"),
                                     require_string(*args.get(1), "replace() argument 2"), args.get_int(2, -1)));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    ArgReader args(fn, call, {"sub", "start", "end"});
    if (!args.get(0)) eval_fail("{}() takes at least 1 argument (0 given)", fn);
    std::string sub = require_string(*args.get(0), "must be str");
    auto [begin, end] = byte_range(s, args, 1);
    std::string_view range(s.data() + begin, end - begin);
    if (name == "count") {
      if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(range)) + 1);
      int64_t n = 0;
      for (size_t p = range.find(sub); p != std::string_view::npos; p = range.find(sub, p + sub.size())) ++n;
      return Value::integer(n);
    }
    size_t hit = name[0] == 'r' ? range.rfind(sub) : range.find(sub);
    if (hit == std::string_view::npos) {
      if (name == "index" || name == "rindex") eval_fail("substring not found");
      return Value::integer(-1);
    }
    return Value::integer(static_cast<int64_t>(utf8_index_of_byte(s, begin + hit)));
  }
  if (name == "join") {
    ArgReader args(fn, call, {"iterable"});
    if (!args.get(0)) eval_fail("join() takes exactly one argument (0 given)");
    std::string out;
    ValueList items = iterate(*args.get(0));
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) eval_fail("sequence item {}: expected str instance, {} found", i, type_name(items[i]));
      check_string_size(out.size(), (i > 0 ? s.size() : 0) + items[i].as_string().size());
      if (i > 0) out += s;
      out += items[i].as_string();
    }
    return Value::string(std::move(out));
  }
  if (name == "splitlines") {
    ArgReader args(fn, call, {"keepends"});
    if (args.get_bool(0, false)) eval_fail("str.splitlines(keepends=True) is not supported");
    return string_list(py_splitlines(s));
  }
  if (name == "partition" || name == "rpartition") {
    ArgReader args(fn, call, {"sep"});
    if (!args.get(0)) eval_fail("{}() takes exactly one argument (0 given)", fn);
    std::string sep = require_string(*args.get(0), "must be str");
    if (sep.empty()) eval_fail("empty separator");
    size_t hit = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (hit == std::string::npos) {
      return name == "partition" ? Value::tuple({Value::string(s), Value::string(""), Value::string("")})
                                 : Value::tuple({Value::string(""), Value::string(""), Value::string(s)});
    }
    return Value::tuple({Value::string(s.substr(0, hit)), Value::string(sep), Value::string(s.substr(hit + sep.size()))});
  }
  if (name == "removeprefix" || name == "removesuffix") {
    ArgReader args(fn, call, {"affix"});
    if (!args.get(0)) eval_fail("{}() takes exactly one argument (0 given)", fn);
    std::string affix = require_string(*args.get(0), "must be str");
    if (name == "removeprefix" && s.compare(0, affix.size(), affix) == 0) return Value::string(s.substr(affix.size()));
    if (name == "removesuffix" && !affix.empty() && s.size() >= affix.size() &&
        s.compare(s.size() - affix.size(), affix.size(), affix) == 0) {
      return Value::string(s.substr(0, s.size() - affix.size()));
    }
    return Value::string(s);
  }
  ArgReader no_args(fn, call, {});
  if (name == "upper") return Value::string(py_upper(s));
  if (name == "lower" || name == "casefold") return Value::string(py_lower(s));
  if (name == "title") return Value::string(py_title(s));
  if (name == "capitalize") return Value::string(py_capitalize(s));
  if (name == "isspace") return Value::boolean(all_chars(s, py_is_space));
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") return Value::boolean(all_chars(s, is_digit));
  if (name == "isalpha") return Value::boolean(all_chars(s, is_alpha));
  if (name == "isalnum") return Value::boolean(all_chars(s, [](char32_t c) { return is_alpha(c) || is_digit(c); }));
  if (name == "islower" || name == "isupper") {
    bool any_cased = false, ok = true;
    for (size_t pos = 0; pos < s.size();) {
      char32_t c = utf8_next(s, pos);
      if (!py_is_cased(c)) continue;
      any_cased = true;
      bool lower = py_to_lower(c) == c && !(py_to_upper(c) == c && c != 0xDF);
      if (name == "islower" ? !lower : lower) ok = false;
    }
    return Value::boolean(any_cased && ok);
  }
  eval_fail("str.{} is not supported", name);
}

constexpr std::array<std::string_view, 24> kStringMethods = {
    "format", "startswith", "endswith", "split", "rsplit", "strip", "lstrip", "rstrip",
    "replace", "find", "rfind", "index", "rindex", "count", "join", "splitlines",
    "partition", "rpartition", "removeprefix", "removesuffix", "upper", "lower", "title", "capitalize"};
constexpr std::array<std::string_view, 8> kStringPredicates = {
    "casefold", "isspace", "isdigit", "isdecimal", "isnumeric", "isalpha", "isalnum", "islower"};

}  // namespace

bool is_string_method(std::string_view name) {
  return std::find(kStringMethods.begin(), kStringMethods.end(), name) != kStringMethods.end() ||
         std::find(kStringPredicates.begin(), kStringPredicates.end(), name) != kStringPredicates.end() ||
         name == "isupper";
}


namespace {

Value escape_arg(const Value& v) {
  return v.is_string() && !v.is_safe() ? Value::string(html_escape(v.as_string()), true) : v;
}

Value mark_safe(const Value& v) {
  if (v.is_string()) return Value::string(v.as_string(), true);
  if (!v.is_list()) return v;
  ValueList items;
  for (const Value& item : v.as_list().items) items.push_back(mark_safe(item));
  return v.as_list().is_tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
}

}  // namespace

Value call_string_method(const Value& self, std::string_view name, const CallArgs& call) {
  if (!self.is_safe()) return call_plain_method(self, name, call);
  // markupsafe.Markup (3.0): replace escapes the replacement, format its arguments, join the
  // items; every string result is Markup again.
  CallArgs args = call;
  if (name == "replace" && args.args.size() >= 2) {
    args.args[1] = escape_arg(args.args[1]);
  } else if (name == "format") {
    for (Value& a : args.args) a = escape_arg(a);
    for (auto& [key, a] : args.kwargs) a = escape_arg(a);
  } else if (name == "join" && !args.args.empty()) {
    ValueList items = iterate(args.args[0]);
    for (Value& item : items) item = escape_arg(item);
    args.args[0] = Value::list(std::move(items));
  }
  return mark_safe(call_plain_method(Value::string(self.as_string()), name, args));
}

}  // namespace kestrel::chat
