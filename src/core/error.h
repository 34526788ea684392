// Error handling for the whole project.
//
// Recoverable errors (bad files, bad requests, bad parameters) are thrown as kestrel::Error
// with a message meant for the user. Broken invariants (bugs) abort with file and line via
// KS_ASSERT. Exceptions never escape the public API or a server handler.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace kestrel {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void throw_error(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace kestrel

// Throws kestrel::Error with a formatted message when `cond` is false.
#define KS_CHECK(cond, ...)                 \
  do {                                      \
    if (!(cond)) ::kestrel::throw_error(__VA_ARGS__); \
  } while (0)

// Aborts with context when an internal invariant is broken. Not for user input.
#define KS_ASSERT(cond, ...)                                                               \
  do {                                                                                     \
    if (!(cond)) ::kestrel::assert_fail(#cond, __FILE__, __LINE__, fmt::format("" __VA_ARGS__)); \
  } while (0)
