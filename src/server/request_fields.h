// Typed reads of a JSON request body's fields. Every mistake is a 400 ApiError that names
// the field, e.g. "'temperature' must be a number, got string". A field set to null counts
// as absent, as OpenAI's API treats it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace kestrel::server {

// JSON type name as a client would say it ("string", "number", "array", ...).
const char* json_type_name(const nlohmann::ordered_json& value);

// The member `key` of `object` when it is a string, else "" (absent, another type, or
// `object` not an object). nlohmann's value(key, "") throws a type_error (a 500) for a
// member of another type, such as a content part's "type": 5.
std::string string_member(const nlohmann::ordered_json& object, std::string_view key);

class FieldReader {
 public:
  // `object` must outlive the reader. `what` names it in errors ("the request body",
  // "stream_options"); `prefix` is prepended to field names ("stream_options.").
  // Throws a 400 when `object` is not a JSON object.
  FieldReader(const nlohmann::ordered_json& object, std::string what = "the request body",
              std::string prefix = "");

  // 400 for the first field not in `known` (OpenAI: "Unrecognized request argument
  // supplied: <name>").
  void reject_unknown(std::initializer_list<std::string_view> known) const;

  // The field, or nullptr when absent or null.
  const nlohmann::ordered_json* find(std::string_view key) const;
  std::optional<double> number(std::string_view key) const;    // finite
  std::optional<float> float32(std::string_view key) const;    // finite as a float too
  std::optional<int64_t> integer(std::string_view key) const;  // integral (5.0 is accepted)
  std::optional<int> int32(std::string_view key) const;
  std::optional<bool> boolean(std::string_view key) const;
  std::optional<std::string> string(std::string_view key) const;

  // "prefix" + key, for messages and ApiError params.
  std::string name(std::string_view key) const { return prefix_ + std::string(key); }
  // The object read, for readers shared with the Python package (structured/spec_fields.h).
  const nlohmann::ordered_json& object() const { return object_; }

 private:
  const nlohmann::ordered_json& object_;
  std::string what_;
  std::string prefix_;
};

}  // namespace kestrel::server
