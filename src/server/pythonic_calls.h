// --tool-call-parser pythonic (vLLM's name; Llama 3.2 and Llama 4, and models tuned like
// them): an answer that is tool calls is a Python list of calls with keyword arguments,
//     [get_weather(city="Paris", unit="celsius"), get_time(zone="Asia/Tokyo")]
// optionally between Llama 4's <|python_start|> and <|python_end|> (when decoding keeps
// them). Argument values are Python literals: strings ('...' or "..."), numbers, True,
// False, None, lists, tuples and dicts with string keys, which become JSON (a tuple an
// array). As llama3_json: an answer starting with "[" (or the tag) is held back to its end;
// if all of it parses as calls, it is calls, else all of it is content. An answer starting
// with anything else is content, streamed as it comes.
#pragma once

#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "server/tool_calls.h"

namespace kestrel::server {

std::unique_ptr<ToolCallParser> make_pythonic_parser();

// The calls `text` (blanks around it allowed) is, or nullopt where it is not one non-empty
// list of calls.
std::optional<std::vector<ToolCall>> parse_pythonic_calls(std::string_view text);

}  // namespace kestrel::server
