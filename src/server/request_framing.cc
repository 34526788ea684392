#include "server/request_framing.h"

#include <strings.h>

#include <algorithm>
#include <cctype>

namespace kestrel::server {
namespace {

constexpr size_t kMaxLengthDigits = 19;  // below 2^63

bool is_decimal(const std::string& s) {
  return !s.empty() && s.size() <= kMaxLengthDigits &&
         std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

// The methods whose body httplib reads (its detail::expect_content).
bool body_is_read(const std::string& method) {
  return method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE" ||
         method == "PRI";
}

}  // namespace

std::optional<ApiError> framing_error(const httplib::Request& req) {
  // httplib keeps "Transfer-Encoding : chunked" as another header, which a proxy may not
  // (RFC 9112 section 5.1: a 400).
  for (const auto& [name, value] : req.headers) {
    if (std::any_of(name.begin(), name.end(), [](char c) { return c == ' ' || c == '\t'; })) {
      return ApiError(400, fmt::format("The header name '{}' has whitespace in it.",
                                       name.substr(0, 40)));
    }
  }
  const size_t lengths = req.get_header_value_count("Content-Length");
  const size_t codings = req.get_header_value_count("Transfer-Encoding");
  if (lengths > 0 && codings > 0) {
    return ApiError(400,
                    "The request has both Content-Length and Transfer-Encoding, which frame its "
                    "body two ways; send one of them.");
  }
  if (lengths > 1) return ApiError(400, "The request has more than one Content-Length header.");
  if (codings > 1) return ApiError(400, "The request has more than one Transfer-Encoding header.");
  if (lengths == 1) {
    const std::string length = req.get_header_value("Content-Length");
    if (!is_decimal(length)) {
      return ApiError(400, fmt::format("Content-Length must be a number of bytes, got '{}'.",
                                       length.substr(0, 40)));
    }
  }
  if (codings == 1) {
    if (req.version == "HTTP/1.0")
      return ApiError(400, "Transfer-Encoding is not part of HTTP/1.0; send a Content-Length.");
    const std::string coding = req.get_header_value("Transfer-Encoding");
    if (strcasecmp(coding.c_str(), "chunked") != 0) {
      return ApiError(501, fmt::format("Transfer-Encoding '{}' is not supported; send the body "
                                       "with a Content-Length or 'Transfer-Encoding: chunked'.",
                                       coding.substr(0, 40)));
    }
  }
  return std::nullopt;
}

bool declares_body(const httplib::Request& req) {
  return req.has_header("Transfer-Encoding") ||
         (req.has_header("Content-Length") && req.get_header_value("Content-Length") != "0");
}

bool body_left_unread(const httplib::Request& req) {
  return !body_is_read(req.method) && declares_body(req);
}

}  // namespace kestrel::server
