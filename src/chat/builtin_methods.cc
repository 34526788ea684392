// Python methods of str, dict and list values, as the immutable sandbox exposes them.
#include <algorithm>
#include <array>

#include "chat/builtins.h"
#include "chat/string_methods.h"
#include "chat/py_format.h"
#include "chat/utf8.h"
#include "chat/value_ops.h"

namespace kestrel::chat {

ArgReader::ArgReader(std::string_view function, const CallArgs& args,
                     std::initializer_list<const char*> params)
    : function_(function), params_(params), bound_(params.size(), nullptr) {
  if (args.args.size() > params_.size()) {
    eval_fail("{}() takes at most {} arguments ({} given)", function_, params_.size(), args.args.size());
  }
  for (size_t i = 0; i < args.args.size(); ++i) bound_[i] = &args.args[i];
  for (const auto& [name, value] : args.kwargs) {
    auto it = std::find_if(params_.begin(), params_.end(), [&](const char* p) { return name == p; });
    if (it == params_.end()) eval_fail("{}() got an unexpected keyword argument '{}'", function_, name);
    size_t index = it - params_.begin();
    if (bound_[index] != nullptr) eval_fail("{}() got multiple values for argument '{}'", function_, name);
    bound_[index] = &value;
  }
}

int64_t ArgReader::get_int(size_t index, int64_t fallback) const {
  const Value* v = bound_[index];
  if (v == nullptr || v->is_none()) return fallback;
  if (v->is_int() || v->is_bool()) return v->as_int();
  eval_fail("{}(): argument '{}' must be an integer, not '{}'", function_, params_[index], type_name(*v));
}

bool ArgReader::get_bool(size_t index, bool fallback) const {
  return bound_[index] ? truthy(*bound_[index]) : fallback;
}

std::optional<std::string> ArgReader::get_string(size_t index) const {
  const Value* v = bound_[index];
  if (v == nullptr || v->is_none()) return std::nullopt;
  if (v->is_string()) return v->as_string();
  eval_fail("{}(): argument '{}' must be str, not '{}'", function_, params_[index], type_name(*v));
}

Value lookup_attribute_path(const Value& item, std::string_view path) {
  Value current = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string_view part = path.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    bool numeric = !part.empty() && part.find_first_not_of("0123456789") == std::string_view::npos;
    current = get_item(current, numeric ? Value::integer(std::stoll(std::string(part)))
                                        : Value::string(std::string(part)));
    if (dot == std::string_view::npos) return current;
    start = dot + 1;
  }
}

namespace {

Value call_dict_method(const Value& self, std::string_view name, const CallArgs& call) {
  const DictData& dict = self.as_dict();
  std::string fn = "dict." + std::string(name);
  if (name == "get") {
    ArgReader args(fn, call, {"key", "default"});
    if (!args.get(0)) eval_fail("get expected at least 1 argument, got 0");
    const Value* v = dict.find(*args.get(0));
    return v ? *v : args.get_or(1, Value::none());
  }
  ArgReader no_args(fn, call, {});
  ValueList out;
  for (const auto& [k, v] : dict.entries) {
    if (name == "keys") out.push_back(k);
    else if (name == "values") out.push_back(v);
    else if (name == "items") out.push_back(Value::tuple({k, v}));
  }
  if (name == "copy") return self;  // values are immutable, so sharing is a copy
  return Value::list(std::move(out));
}

Value call_list_method(const Value& self, std::string_view name, const CallArgs& call) {
  const ValueList& items = self.as_list().items;
  std::string fn = "list." + std::string(name);
  if (name == "copy") {
    ArgReader no_args(fn, call, {});
    return Value::list(items);
  }
  ArgReader args(fn, call, {"value"});
  if (!args.get(0)) eval_fail("{}() takes exactly one argument (0 given)", fn);
  int64_t count = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!values_equal(items[i], *args.get(0))) continue;
    if (name == "index") return Value::integer(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") eval_fail("{} is not in list", py_repr(*args.get(0)));
  return Value::integer(count);
}

Value unsafe(const Value& obj, std::string_view name) {
  return Value::undefined(fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type_name(obj)));
}

}  // namespace

std::optional<Value> bind_method(const Value& obj, std::string_view name) {
  auto bind = [&](Value (*call)(const Value&, std::string_view, const CallArgs&)) {
    std::string method(name);
    return Value::function(type_name(obj) + "." + method,
                           [obj, method, call](const CallArgs& args) { return call(obj, method, args); });
  };
  if (obj.is_string()) {
    if (is_string_method(name)) return bind(call_string_method);
    return std::nullopt;
  }
  if (obj.is_dict()) {
    if (name == "get" || name == "keys" || name == "values" || name == "items" || name == "copy") {
      return bind(call_dict_method);
    }
    if (name == "clear" || name == "pop" || name == "popitem" || name == "setdefault" || name == "update") {
      return unsafe(obj, name);
    }
    return std::nullopt;
  }
  if (obj.is_list() && !obj.as_list().is_iterator) {
    bool is_tuple = obj.as_list().is_tuple;
    if (name == "count" || name == "index" || (!is_tuple && name == "copy")) return bind(call_list_method);
    if (!is_tuple && (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
                      name == "remove" || name == "reverse" || name == "sort" || name == "clear")) {
      return unsafe(obj, name);
    }
  }
  return std::nullopt;
}

}  // namespace kestrel::chat
