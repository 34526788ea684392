// The values a chat template computes with, modelled on the Python objects jinja2 sees.
//
// Kinds: undefined (jinja2's default Undefined: prints "", is falsy, iterates empty, fails on
// attribute access), none, bool, int (64-bit), float, string (UTF-8; may be marked "safe",
// i.e. markupsafe.Markup), list (also tuples and one-shot iterators such as the result of
// `|select`), dict (keys in insertion order, like Python dicts), namespace, function
// (globals, bound methods, macros).
//
// Lists, dicts and strings are immutable and shared: copying a Value is cheap and values may
// be read from several threads. A namespace is the one mutable kind (`{% set ns.x = 1 %}`);
// namespaces are created during a render and never shared between renders.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace kestrel::chat {

class Value;
using ValueList = std::vector<Value>;

struct ListData {
  ValueList items;
  bool is_tuple = false;
  // A generator/iterator in Python (results of map, select, unique, items, ...): always truthy
  // and has no length.
  bool is_iterator = false;
};

struct DictData {
  std::vector<std::pair<Value, Value>> entries;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
};

struct NamespaceData {
  std::vector<std::pair<std::string, Value>> attrs;
  const Value* find(std::string_view name) const;
  void set(const std::string& name, Value value);
};

struct CallArgs {
  ValueList args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

using NativeFunction = std::function<Value(const CallArgs&)>;

struct FunctionData {
  std::string name;
  NativeFunction fn;
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction
  };

  // Undefined; `hint` is the message used when the value is used in a way that fails
  // (e.g. "'x' is undefined", "'dict object' has no attribute 'y'").
  Value() = default;
  static Value undefined(std::string hint);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double f);
  static Value string(std::string s, bool safe = false);
  static Value list(ValueList items);
  static Value tuple(ValueList items);
  static Value iterator(ValueList items);
  static Value dict(std::vector<std::pair<Value, Value>> entries);
  static Value new_namespace();
  static Value function(std::string name, NativeFunction fn);

  static Value from_json(const nlohmann::ordered_json& json);
  // Undefined and functions have no JSON form: throws kestrel::Error.
  nlohmann::ordered_json to_json() const;

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_function() const { return kind_ == Kind::kFunction; }

  // Accessors; REQUIRES: the matching kind (checked with KS_ASSERT).
  bool as_bool() const;
  int64_t as_int() const;  // also accepts bool
  double as_float() const;  // also accepts int and bool
  const std::string& as_string() const;
  bool is_safe() const { return safe_; }
  const ListData& as_list() const;
  const DictData& as_dict() const;
  NamespaceData& as_namespace() const;
  const FunctionData& as_function() const;
  const std::string& undefined_hint() const;
  // Identity of shared objects (Python's `is` for lists, dicts, namespaces, functions).
  const void* identity() const;

 private:
  using Storage = std::variant<std::monostate, bool, int64_t, double,
                               std::shared_ptr<const std::string>, std::shared_ptr<const ListData>,
                               std::shared_ptr<const DictData>, std::shared_ptr<NamespaceData>,
                               std::shared_ptr<const FunctionData>>;
  Kind kind_ = Kind::kUndefined;
  bool safe_ = false;
  Storage data_;
};

}  // namespace kestrel::chat
