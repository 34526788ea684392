// Filters over sequences and mappings: first/last/join/sort/unique/map/select/...
//
// jinja2 returns generators from map, select, reject, selectattr, rejectattr, unique and items;
// they come back here as iterator values (always truthy, no length), like the Python ones.
#include <algorithm>

#include "chat/builtins.h"
#include "chat/limits.h"
#include "chat/utf8.h"
#include "chat/value_ops.h"

namespace kestrel::chat {

namespace {

Value ignore_case(const Value& v) { return v.is_string() ? Value::string(py_lower(v.as_string())) : v; }

void require_hashable(const Value& v) {
  if ((v.is_list() && !v.as_list().is_tuple) || v.is_dict()) eval_fail("unhashable type: '{}'", type_name(v));
}

Value f_list(const Value& t, const CallArgs& a) {
  ArgReader("list", a, {});
  return Value::list(iterate(t));
}

Value f_first(const Value& t, const CallArgs& a) {
  ArgReader("first", a, {});
  ValueList items = iterate(t);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(const Value& t, const CallArgs& a) {
  ArgReader("last", a, {});
  if (t.is_list() && t.as_list().is_iterator) eval_fail("'generator' object is not reversible");
  ValueList items = iterate(t);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_reverse(const Value& t, const CallArgs& a) {
  ArgReader("reverse", a, {});
  if (t.is_string()) {
    std::vector<std::string> chars = utf8_chars(t.as_string());
    std::string out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
    return Value::string(std::move(out), t.is_safe());
  }
  ValueList items = iterate(t);
  std::reverse(items.begin(), items.end());
  // reversed() of a list is an iterator; a generator is first copied into a list.
  if (t.is_list() && t.as_list().is_iterator) return Value::list(std::move(items));
  return Value::iterator(std::move(items));
}

Value f_join(const Value& t, const CallArgs& a) {
  ArgReader args("join", a, {"d", "attribute"});
  std::string separator = py_str(args.get_or(0, Value::string("")));
  std::optional<std::string> attribute;
  if (const Value* attr = args.get(1); attr != nullptr && !attr->is_none()) attribute = py_str(*attr);
  std::string out;
  bool first = true;
  for (const Value& item : iterate(t)) {
    std::string part = py_str(attribute ? lookup_attribute_path(item, *attribute) : item);
    check_string_size(out.size(), (first ? 0 : separator.size()) + part.size());
    if (!first) out += separator;
    first = false;
    out += part;
  }
  return Value::string(std::move(out));
}

Value f_items(const Value& t, const CallArgs& a) {
  ArgReader("items", a, {});
  if (t.is_undefined()) return Value::iterator({});
  if (!t.is_dict()) eval_fail("Can only get item pairs from a mapping.");
  ValueList pairs;
  for (const auto& [k, v] : t.as_dict().entries) pairs.push_back(Value::tuple({k, v}));
  return Value::iterator(std::move(pairs));
}

// The sort key jinja2 builds: a list of the item (or of its attributes, comma separated),
// lower-cased. Being a list matters: equal keys compare equal without calling `<`.
Value sort_key(const Value& item, const std::optional<std::string>& attribute, bool case_sensitive) {
  auto post = [&](const Value& v) { return case_sensitive ? v : ignore_case(v); };
  if (!attribute) return Value::list({post(item)});
  ValueList keys;
  size_t start = 0;
  while (true) {
    size_t comma = attribute->find(',', start);
    keys.push_back(post(lookup_attribute_path(item, attribute->substr(start, comma - start))));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return Value::list(std::move(keys));
}

std::optional<std::string> attribute_arg(const ArgReader& args, size_t index) {
  const Value* attr = args.get(index);
  if (attr == nullptr || attr->is_none()) return std::nullopt;
  return py_str(*attr);
}

Value f_sort(const Value& t, const CallArgs& a) {
  ArgReader args("sort", a, {"reverse", "case_sensitive", "attribute"});
  bool reverse = args.get_bool(0, false), case_sensitive = args.get_bool(1, false);
  std::optional<std::string> attribute = attribute_arg(args, 2);
  std::vector<std::pair<Value, Value>> keyed;  // (key, item)
  for (const Value& item : iterate(t)) keyed.emplace_back(sort_key(item, attribute, case_sensitive), item);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? values_less(y.first, x.first) : values_less(x.first, y.first);
  });
  ValueList out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return Value::list(std::move(out));
}

Value f_dictsort(const Value& t, const CallArgs& a) {
  ArgReader args("dictsort", a, {"case_sensitive", "by", "reverse"});
  if (!t.is_dict()) eval_fail("dictsort requires a mapping, not '{}'", type_name(t));
  bool case_sensitive = args.get_bool(0, false), reverse = args.get_bool(2, false);
  std::string by = args.get_string(1).value_or("key");
  if (by != "key" && by != "value") eval_fail("You can only sort by either \"key\" or \"value\"");
  size_t pos = by == "key" ? 0 : 1;
  std::vector<std::pair<Value, Value>> entries = t.as_dict().entries;
  auto key = [&](const std::pair<Value, Value>& e) {
    const Value& v = pos == 0 ? e.first : e.second;
    return case_sensitive ? v : ignore_case(v);
  };
  std::stable_sort(entries.begin(), entries.end(), [&](const auto& x, const auto& y) {
    return reverse ? values_less(key(y), key(x)) : values_less(key(x), key(y));
  });
  ValueList out;
  for (auto& [k, v] : entries) out.push_back(Value::tuple({k, v}));
  return Value::list(std::move(out));
}

Value f_unique(const Value& t, const CallArgs& a) {
  ArgReader args("unique", a, {"case_sensitive", "attribute"});
  bool case_sensitive = args.get_bool(0, false);
  std::optional<std::string> attribute = attribute_arg(args, 1);
  ValueList seen, out;
  for (const Value& item : iterate(t)) {
    Value key = attribute ? lookup_attribute_path(item, *attribute) : item;
    if (!case_sensitive) key = ignore_case(key);
    require_hashable(key);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return values_equal(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Value::iterator(std::move(out));
}

Value min_or_max(const Value& t, const CallArgs& a, bool want_max) {
  ArgReader args(want_max ? "max" : "min", a, {"case_sensitive", "attribute"});
  bool case_sensitive = args.get_bool(0, false);
  std::optional<std::string> attribute = attribute_arg(args, 1);
  ValueList items = iterate(t);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& item) {
    Value k = attribute ? lookup_attribute_path(item, *attribute) : item;
    return case_sensitive ? k : ignore_case(k);
  };
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    bool better = want_max ? values_less(key(items[best]), key(items[i])) : values_less(key(items[i]), key(items[best]));
    if (better) best = i;
  }
  return items[best];
}

Value f_min(const Value& t, const CallArgs& a) { return min_or_max(t, a, false); }
Value f_max(const Value& t, const CallArgs& a) { return min_or_max(t, a, true); }

Value f_sum(const Value& t, const CallArgs& a) {
  ArgReader args("sum", a, {"attribute", "start"});
  std::optional<std::string> attribute = attribute_arg(args, 0);
  Value total = args.get_or(1, Value::integer(0));
  for (const Value& item : iterate(t)) {
    total = binary_op(BinaryOp::kAdd, total, attribute ? lookup_attribute_path(item, *attribute) : item);
  }
  return total;
}

Value f_map(const Value& t, const CallArgs& a) {
  if (!truthy(t)) return Value::iterator({});
  ValueList out;
  if (a.args.empty()) {
    std::optional<std::string> attribute;
    Value fallback = Value::none();
    for (const auto& [k, v] : a.kwargs) {
      if (k == "attribute") attribute = py_str(v);
      else if (k == "default") fallback = v;
      else eval_fail("Unexpected keyword argument '{}'", k);
    }
    if (!attribute) eval_fail("map requires a filter argument");
    for (const Value& item : iterate(t)) {
      Value v = lookup_attribute_path(item, *attribute);
      out.push_back(v.is_undefined() && !fallback.is_none() ? fallback : v);
    }
    return Value::iterator(std::move(out));
  }
  if (!a.args[0].is_string()) eval_fail("map filter name must be a string");
  std::string name = a.args[0].as_string();
  CallArgs rest{ValueList(a.args.begin() + 1, a.args.end()), a.kwargs};
  for (const Value& item : iterate(t)) out.push_back(apply_filter(name, item, rest));
  return Value::iterator(std::move(out));
}

Value select_or_reject(const Value& t, const CallArgs& a, bool select, bool lookup_attr) {
  if (!truthy(t)) return Value::iterator({});
  size_t offset = 0;
  std::optional<std::string> attribute;
  if (lookup_attr) {
    if (a.args.empty()) eval_fail("Missing parameter for attribute name");
    attribute = py_str(a.args[0]);
    offset = 1;
  }
  std::optional<std::string> test;
  if (a.args.size() > offset) test = py_str(a.args[offset]);
  CallArgs rest{a.args.size() > offset + 1 ? ValueList(a.args.begin() + offset + 1, a.args.end()) : ValueList{},
                a.kwargs};
  ValueList out;
  for (const Value& item : iterate(t)) {
    Value subject = attribute ? lookup_attribute_path(item, *attribute) : item;
    bool passed = test ? apply_test(*test, subject, rest) : truthy(subject);
    if (passed == select) out.push_back(item);
  }
  return Value::iterator(std::move(out));
}

Value f_select(const Value& t, const CallArgs& a) { return select_or_reject(t, a, true, false); }
Value f_reject(const Value& t, const CallArgs& a) { return select_or_reject(t, a, false, false); }
Value f_selectattr(const Value& t, const CallArgs& a) { return select_or_reject(t, a, true, true); }
Value f_rejectattr(const Value& t, const CallArgs& a) { return select_or_reject(t, a, false, true); }

Value f_attr(const Value& t, const CallArgs& a) {
  ArgReader args("attr", a, {"name"});
  if (!args.get(0)) eval_fail("attr() missing required argument 'name'");
  std::string name = py_str(*args.get(0));
  if (std::optional<Value> method = bind_method(t, name)) return *method;
  if (t.is_namespace()) {
    if (const Value* v = t.as_namespace().find(name)) return *v;
  }
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(t), name));
}

struct NamedFilter {
  std::string_view name;
  FilterFn fn;
};

constexpr NamedFilter kSequenceFilters[] = {
    {"attr", f_attr},     {"dictsort", f_dictsort},     {"first", f_first},   {"items", f_items},
    {"join", f_join},     {"last", f_last},             {"list", f_list},     {"map", f_map},
    {"max", f_max},       {"min", f_min},               {"reject", f_reject}, {"rejectattr", f_rejectattr},
    {"reverse", f_reverse}, {"select", f_select},       {"selectattr", f_selectattr},
    {"sort", f_sort},     {"sum", f_sum},               {"unique", f_unique},
};

}  // namespace

FilterFn find_sequence_filter(std::string_view name) {
  for (const NamedFilter& f : kSequenceFilters) {
    if (f.name == name) return f.fn;
  }
  return nullptr;
}

}  // namespace kestrel::chat
