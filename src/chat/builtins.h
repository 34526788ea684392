// The built-in filters, tests, methods and globals of the jinja2 environment Hugging Face
// renders chat templates with (ImmutableSandboxedEnvironment + HF's tojson, raise_exception and
// strftime_now). All are pure functions of their arguments and safe to call from any thread.
//
// Errors throw EvalError (see value_ops.h).
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/value.h"

namespace kestrel::chat {

using FilterFn = Value (*)(const Value& target, const CallArgs& args);
using TestFn = bool (*)(const Value& target, const CallArgs& args);

// nullptr when jinja2 has no such filter/test (or this implementation does not support it).
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);

// The filters of builtin_seq_filters.cc (find_filter consults them too).
FilterFn find_sequence_filter(std::string_view name);

// Applies a filter/test by name; throws EvalError for an unknown name.
Value apply_filter(std::string_view name, const Value& target, const CallArgs& args);
bool apply_test(std::string_view name, const Value& target, const CallArgs& args);

// A Python method of `obj` (str, dict, list methods) bound to it, or an "unsafe" undefined for
// methods the immutable sandbox forbids (list.append, dict.update, ...). nullopt when the type
// has no attribute of that name.
std::optional<Value> bind_method(const Value& obj, std::string_view name);

// Globals: range, dict, namespace, raise_exception, strftime_now.
std::optional<Value> find_global(std::string_view name);

// Binds positional and keyword arguments to named parameters, as Python does.
class ArgReader {
 public:
  ArgReader(std::string_view function, const CallArgs& args, std::initializer_list<const char*> params);

  // The argument for parameter `index`, or nullptr when not given.
  const Value* get(size_t index) const { return bound_[index]; }
  Value get_or(size_t index, Value fallback) const { return bound_[index] ? *bound_[index] : fallback; }
  // The argument as an int/bool/string, with a clear error for another type.
  int64_t get_int(size_t index, int64_t fallback) const;
  bool get_bool(size_t index, bool fallback) const;  // any value, by truthiness
  std::optional<std::string> get_string(size_t index) const;

 private:
  std::string function_;
  std::vector<const char*> params_;
  std::vector<const Value*> bound_;
};

// jinja2's make_attrgetter: "a.b.0" looks up item a, then b, then index 0.
Value lookup_attribute_path(const Value& item, std::string_view path);

}  // namespace kestrel::chat
