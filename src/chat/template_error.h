// The error a chat template raises, at parse time (syntax) or render time (a type error, an
// undefined value used where a real one is needed, or the template's own raise_exception()).
#pragma once

#include <string>

#include "core/error.h"

namespace kestrel {

class TemplateError : public Error {
 public:
  // `line` and `column` are 1-based (column counts bytes) in the template source.
  TemplateError(std::string message, int line, int column, bool raised_by_template);

  // The message alone, without the location: for raise_exception() this is exactly the text
  // the template passed (e.g. "Conversation roles must alternate user/assistant/...").
  const std::string& message() const { return message_; }
  int line() const { return line_; }
  int column() const { return column_; }
  bool raised_by_template() const { return raised_by_template_; }

 private:
  std::string message_;
  int line_;
  int column_;
  bool raised_by_template_;
};

}  // namespace kestrel
