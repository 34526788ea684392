#include "chat/value.h"

#include <limits>

#include "chat/value_ops.h"
#include "core/error.h"

namespace kestrel::chat {

const Value* DictData::find(const Value& key) const {
  for (const auto& [k, v] : entries) {
    if (values_equal(k, key)) return &v;
  }
  return nullptr;
}

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k.is_string() && k.as_string() == key) return &v;
  }
  return nullptr;
}

const Value* NamespaceData::find(std::string_view name) const {
  for (const auto& [k, v] : attrs) {
    if (k == name) return &v;
  }
  return nullptr;
}

void NamespaceData::set(const std::string& name, Value value) {
  for (auto& [k, v] : attrs) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  attrs.emplace_back(name, std::move(value));
}

Value Value::undefined(std::string hint) {
  Value v;
  v.data_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.data_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.data_ = i;
  return v;
}

Value Value::number(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.data_ = f;
  return v;
}

Value Value::string(std::string s, bool safe) {
  Value v;
  v.kind_ = Kind::kString;
  v.safe_ = safe;
  v.data_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::list(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  v.data_ = std::make_shared<const ListData>(ListData{std::move(items), false, false});
  return v;
}

Value Value::tuple(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  v.data_ = std::make_shared<const ListData>(ListData{std::move(items), true, false});
  return v;
}

Value Value::iterator(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  v.data_ = std::make_shared<const ListData>(ListData{std::move(items), false, true});
  return v;
}

Value Value::dict(std::vector<std::pair<Value, Value>> entries) {
  Value v;
  v.kind_ = Kind::kDict;
  v.data_ = std::make_shared<const DictData>(DictData{std::move(entries)});
  return v;
}

Value Value::new_namespace() {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.data_ = std::make_shared<NamespaceData>();
  return v;
}

Value Value::function(std::string name, NativeFunction fn) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.data_ = std::make_shared<const FunctionData>(FunctionData{std::move(name), std::move(fn)});
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& json) {
  using T = nlohmann::ordered_json::value_t;
  switch (json.type()) {
    case T::null:
      return none();
    case T::boolean:
      return boolean(json.get<bool>());
    case T::number_integer:
      return integer(json.get<int64_t>());
    case T::number_unsigned: {
      uint64_t u = json.get<uint64_t>();
      KS_CHECK(u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
               "chat template input: integer {} is too large (64-bit signed integers only)", u);
      return integer(static_cast<int64_t>(u));
    }
    case T::number_float:
      return number(json.get<double>());
    case T::string:
      return string(json.get<std::string>());
    case T::array: {
      ValueList items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json(item));
      return list(std::move(items));
    }
    case T::object: {
      std::vector<std::pair<Value, Value>> entries;
      entries.reserve(json.size());
      for (const auto& [key, item] : json.items()) {
        entries.emplace_back(string(key), from_json(item));
      }
      return dict(std::move(entries));
    }
    default:
      throw_error("chat template input: unsupported JSON value of type {}", json.type_name());
  }
}

nlohmann::ordered_json Value::to_json() const {
  switch (kind_) {
    case Kind::kNone:
      return nullptr;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int();
    case Kind::kFloat:
      return as_float();
    case Kind::kString:
      return as_string();
    case Kind::kList: {
      auto out = nlohmann::ordered_json::array();
      for (const Value& item : as_list().items) out.push_back(item.to_json());
      return out;
    }
    case Kind::kDict: {
      auto out = nlohmann::ordered_json::object();
      for (const auto& [k, v] : as_dict().entries) out[py_str(k)] = v.to_json();
      return out;
    }
    case Kind::kNamespace: {
      auto out = nlohmann::ordered_json::object();
      for (const auto& [k, v] : as_namespace().attrs) out[k] = v.to_json();
      return out;
    }
    default:
      throw_error("a {} value has no JSON form", type_name(*this));
  }
}

bool Value::as_bool() const {
  KS_ASSERT(kind_ == Kind::kBool);
  return std::get<bool>(data_);
}

int64_t Value::as_int() const {
  if (kind_ == Kind::kBool) return std::get<bool>(data_) ? 1 : 0;
  KS_ASSERT(kind_ == Kind::kInt);
  return std::get<int64_t>(data_);
}

double Value::as_float() const {
  if (kind_ == Kind::kFloat) return std::get<double>(data_);
  return static_cast<double>(as_int());
}

const std::string& Value::as_string() const {
  KS_ASSERT(kind_ == Kind::kString);
  return *std::get<std::shared_ptr<const std::string>>(data_);
}

const ListData& Value::as_list() const {
  KS_ASSERT(kind_ == Kind::kList);
  return *std::get<std::shared_ptr<const ListData>>(data_);
}

const DictData& Value::as_dict() const {
  KS_ASSERT(kind_ == Kind::kDict);
  return *std::get<std::shared_ptr<const DictData>>(data_);
}

NamespaceData& Value::as_namespace() const {
  KS_ASSERT(kind_ == Kind::kNamespace);
  return *std::get<std::shared_ptr<NamespaceData>>(data_);
}

const FunctionData& Value::as_function() const {
  KS_ASSERT(kind_ == Kind::kFunction);
  return *std::get<std::shared_ptr<const FunctionData>>(data_);
}

const std::string& Value::undefined_hint() const {
  static const std::string kNoHint = "value is undefined";
  KS_ASSERT(kind_ == Kind::kUndefined);
  const auto* hint = std::get_if<std::shared_ptr<const std::string>>(&data_);
  return hint != nullptr ? **hint : kNoHint;
}

const void* Value::identity() const {
  switch (kind_) {
    case Kind::kString:
      return std::get<std::shared_ptr<const std::string>>(data_).get();
    case Kind::kList:
      return std::get<std::shared_ptr<const ListData>>(data_).get();
    case Kind::kDict:
      return std::get<std::shared_ptr<const DictData>>(data_).get();
    case Kind::kNamespace:
      return std::get<std::shared_ptr<NamespaceData>>(data_).get();
    case Kind::kFunction:
      return std::get<std::shared_ptr<const FunctionData>>(data_).get();
    default:
      return nullptr;
  }
}

}  // namespace kestrel::chat
