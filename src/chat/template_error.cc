#include "chat/template_error.h"

#include <fmt/format.h>

namespace kestrel {

namespace {

std::string describe(const std::string& message, int line, int column, bool raised) {
  if (raised) {
    return fmt::format("chat template raised an error (line {}, column {}): {}", line, column, message);
  }
  return fmt::format("chat template error at line {}, column {}: {}", line, column, message);
}

}  // namespace

TemplateError::TemplateError(std::string message, int line, int column, bool raised_by_template)
    : Error(describe(message, line, column, raised_by_template)),
      message_(std::move(message)),
      line_(line),
      column_(column),
      raised_by_template_(raised_by_template) {}

}  // namespace kestrel
