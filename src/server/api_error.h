// Errors the HTTP API returns, in OpenAI's shape:
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "temperature",
//              "code": null}}
// A handler throws ApiError; the server turns it into that body with its HTTP status.
#pragma once

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>

#include "core/error.h"

namespace kestrel::server {

class ApiError : public Error {
 public:
  // status: HTTP status (400, 401, 404, 413, 500, 503). type: OpenAI's error type
  // ("invalid_request_error", "authentication_error", "server_error", ...). param: the
  // request field at fault ("" for none). code: a machine-readable code ("" for none).
  ApiError(int status, std::string message, std::string param = "",
           std::string type = "invalid_request_error", std::string code = "");

  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& type() const { return type_; }
  const std::string& code() const { return code_; }
  // The {"error": {...}} body.
  nlohmann::json body() const;

 private:
  int status_;
  std::string param_;
  std::string type_;
  std::string code_;
};

// A 400 naming `param`, with the message built like fmt::format.
template <typename... Args>
[[noreturn]] void throw_bad_request(const std::string& param, fmt::format_string<Args...> format,
                                    Args&&... args) {
  throw ApiError(400, fmt::format(format, std::forward<Args>(args)...), param);
}

// The chat parser's error `e` as another endpoint (the Responses and Messages APIs, which
// are read as chat requests) names its fields: each `from` in the message and the param
// replaced by its `to`, in order, then a param equal to a `whole` key replaced by its value.
using FieldNames = std::initializer_list<std::pair<std::string_view, std::string_view>>;
ApiError with_field_names(const ApiError& e, FieldNames in_text, FieldNames whole = {});

// The {"error": {...}} body for a status without an ApiError (404 route, 413, ...).
nlohmann::json error_body(const std::string& message, const std::string& type,
                          const std::string& param = "", const std::string& code = "");

}  // namespace kestrel::server
