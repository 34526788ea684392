#include "server/api_error.h"

namespace kestrel::server {

ApiError::ApiError(int status, std::string message, std::string param, std::string type,
                   std::string code)
    : Error(std::move(message)),
      status_(status),
      param_(std::move(param)),
      type_(std::move(type)),
      code_(std::move(code)) {}

ApiError with_field_names(const ApiError& e, FieldNames in_text, FieldNames whole) {
  std::string message = e.what(), param = e.param();
  for (std::string* s : {&message, &param}) {
    for (const auto& [from, to] : in_text) {
      for (size_t pos = 0; (pos = s->find(from, pos)) != std::string::npos; pos += to.size()) {
        s->replace(pos, from.size(), to);
      }
    }
  }
  for (const auto& [from, to] : whole) {
    if (param == from) param = std::string(to);
  }
  return ApiError(e.status(), message, param, e.type(), e.code());
}

nlohmann::json ApiError::body() const { return error_body(what(), type_, param_, code_); }

nlohmann::json error_body(const std::string& message, const std::string& type,
                          const std::string& param, const std::string& code) {
  nlohmann::json error = {{"message", message}, {"type", type}};
  error["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  error["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  return {{"error", error}};
}

}  // namespace kestrel::server
