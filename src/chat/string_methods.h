// Python's str methods for template strings, with markupsafe's (3.0) behaviour for Markup
// (safe) strings: string results stay Markup, and the replacement of `replace`, the arguments
// of `format` and the items of `join` are HTML-escaped first.
#pragma once

#include <string_view>

#include "chat/value.h"

namespace kestrel::chat {

bool is_string_method(std::string_view name);
// REQUIRES: self is a string and is_string_method(name). Throws EvalError.
Value call_string_method(const Value& self, std::string_view name, const CallArgs& call);

}  // namespace kestrel::chat
