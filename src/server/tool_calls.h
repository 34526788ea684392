// Tool calls in a chat answer, parsed out of the model's text: `--tool-call-parser hermes`
// (vLLM's name) reads the markup of Hermes-style models (Qwen2.5, Qwen3, NousResearch
// Hermes), each call as
//     <tool_call>
//     {"name": "get_weather", "arguments": {"city": "Paris"}}
//     </tool_call>
// into OpenAI's `message.tool_calls` (streamed as `delta.tool_calls`, one delta per call once
// its closing tag arrives), with finish_reason "tool_calls". The text around the calls stays
// content. A call whose body is not a JSON object with a string "name" is left in the
// content, markup and all, as vLLM does; so is a <tool_call> that never closes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kestrel::server {

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text of the arguments object, as OpenAI sends it
};

struct ToolCallPiece {
  std::string content;
  std::vector<ToolCall> calls;
};

class ToolCallParser {
 public:
  // The parts of `text` (appended to what came before) that are final now.
  ToolCallPiece feed(std::string_view text);
  // What was held back, at the end of the output.
  ToolCallPiece finish();

 private:
  bool in_call_ = false;
  std::string pending_;    // outside a call: a possible start of <tool_call>
  std::string call_body_;  // inside a call: its text so far
};

// The names --tool-call-parser takes.
bool known_tool_call_parser(const std::string& name);

}  // namespace kestrel::server
