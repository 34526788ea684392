#include "server/request_fields.h"

#include <cmath>
#include <limits>

#include "core/json_parse.h"
#include "server/api_error.h"
#include "server/request_parser.h"

namespace kestrel::server {

std::string string_member(const nlohmann::ordered_json& object, std::string_view key) {
  if (!object.is_object()) return "";
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

const char* json_type_name(const nlohmann::ordered_json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::object:
      return "object";
    case nlohmann::json::value_t::array:
      return "array";
    case nlohmann::json::value_t::string:
      return "string";
    case nlohmann::json::value_t::boolean:
      return "boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return "integer";
    case nlohmann::json::value_t::number_float:
      return "number";
    default:
      return "unknown";
  }
}

FieldReader::FieldReader(const nlohmann::ordered_json& object, std::string what, std::string prefix)
    : object_(object), what_(std::move(what)), prefix_(std::move(prefix)) {
  if (!object_.is_object()) {
    std::string param = prefix_;
    if (!param.empty() && param.back() == '.') param.pop_back();
    throw_bad_request(param, "{} must be a JSON object, got {}", what_, json_type_name(object_));
  }
}

void FieldReader::reject_unknown(std::initializer_list<std::string_view> known) const {
  for (const auto& [key, value] : object_.items()) {
    bool found = false;
    for (std::string_view k : known) found = found || k == key;
    if (!found)
      throw_bad_request(name(key), "Unrecognized request argument supplied: {}", name(key));
  }
}

const nlohmann::ordered_json* FieldReader::find(std::string_view key) const {
  auto it = object_.find(std::string(key));
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<double> FieldReader::number(std::string_view key) const {
  const nlohmann::ordered_json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_number()) {
    throw_bad_request(name(key), "'{}' must be a number, got {}", name(key), json_type_name(*v));
  }
  const double d = v->get<double>();
  if (!std::isfinite(d)) throw_bad_request(name(key), "'{}' must be finite", name(key));
  return d;
}

std::optional<float> FieldReader::float32(std::string_view key) const {
  const std::optional<double> d = number(key);
  if (!d) return std::nullopt;
  // A double past FLT_MAX would become inf, and a later check would quote that, not the value.
  if (std::fabs(*d) > double(std::numeric_limits<float>::max())) {
    throw_bad_request(name(key), "'{}' is out of range: {}", name(key), *d);
  }
  return static_cast<float>(*d);
}

std::optional<int64_t> FieldReader::integer(std::string_view key) const {
  const nlohmann::ordered_json* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() &&
        v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
      throw_bad_request(name(key), "'{}' is out of range", name(key));
    }
    return v->get<int64_t>();
  }
  if (v->is_number_float()) {
    const double d = v->get<double>();
    // Python clients send 5.0 for 5; pydantic (vLLM) accepts it, so do we.
    if (std::isfinite(d) && d == std::floor(d)) {
      if (std::fabs(d) < 9.0e15) return int64_t(d);
      throw_bad_request(name(key), "'{}' is out of range", name(key));  // 2^70, say
    }
  }
  throw_bad_request(name(key), "'{}' must be an integer, got {}", name(key), json_type_name(*v));
}

std::optional<int> FieldReader::int32(std::string_view key) const {
  const std::optional<int64_t> v = integer(key);
  if (!v) return std::nullopt;
  if (*v < std::numeric_limits<int>::min() || *v > std::numeric_limits<int>::max()) {
    throw_bad_request(name(key), "'{}' is out of range: {}", name(key), *v);
  }
  return static_cast<int>(*v);
}

std::optional<bool> FieldReader::boolean(std::string_view key) const {
  const nlohmann::ordered_json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) {
    throw_bad_request(name(key), "'{}' must be a boolean, got {}", name(key), json_type_name(*v));
  }
  return v->get<bool>();
}

std::optional<std::string> FieldReader::string(std::string_view key) const {
  const nlohmann::ordered_json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) {
    throw_bad_request(name(key), "'{}' must be a string, got {}", name(key), json_type_name(*v));
  }
  return v->get<std::string>();
}

nlohmann::ordered_json parse_request_body(const std::string& text) {
  try {
    return parse_untrusted_json(text);
  } catch (const JsonLimitError& e) {
    throw ApiError(400, fmt::format("The request body {}.", e.what()));
  } catch (const nlohmann::json::exception& e) {
    throw ApiError(400, fmt::format("The request body is not valid JSON: {}", e.what()));
  }
}

}  // namespace kestrel::server
