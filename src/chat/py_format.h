// Python's text formats for template values: json.dumps (as Hugging Face's `tojson` calls it),
// printf-style `str % args`, `str.format(...)` and markupsafe's HTML escape.
//
// All functions throw EvalError where Python raises (a value JSON cannot hold, a format string
// that does not fit its arguments).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "chat/value.h"

namespace kestrel::chat {

struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: one line
  std::optional<std::string> item_separator;  // default ", " (one line) or "," (indented)
  std::string key_separator = ": ";
  bool sort_keys = false;
};

// json.dumps(value, ...) with Python's exact spacing, escapes and float repr.
std::string json_dumps(const Value& value, const JsonDumpOptions& options);

// markupsafe.escape: & < > " ' become entities.
std::string html_escape(std::string_view s);

// Python's `format % args`; a tuple supplies several arguments, a dict named ones.
std::string percent_format(std::string_view format, const Value& args);

// Python's `format.format(*args, **kwargs)`.
std::string str_format(std::string_view format, const CallArgs& args);

// format(value, spec) for strings, ints, floats and bools.
std::string format_with_spec(const Value& value, std::string_view spec);

}  // namespace kestrel::chat
