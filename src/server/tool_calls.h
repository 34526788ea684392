// Tool calls in a chat answer, parsed out of the model's text into OpenAI's
// `message.tool_calls` (streamed as `delta.tool_calls`, one delta per call once it is
// complete), with finish_reason "tool_calls". `--tool-call-parser` names the markup, as
// vLLM's flag of the same name does:
// - hermes (Qwen2.5, Qwen3, NousResearch Hermes): each call as
//       <tool_call>
//       {"name": "get_weather", "arguments": {"city": "Paris"}}
//       </tool_call>
//   with text around the calls kept as content. A call whose body is not a JSON object with
//   a string "name" stays in the content, markup and all, as vLLM does; so does a
//   <tool_call> that never closes.
// - pythonic (Llama 3.2, Llama 4): a Python list of calls, pythonic_calls.h.
// - mistral (Mistral models): [TOOL_CALLS] then a JSON list of {"name", "arguments"} objects
//   (v0.3 tokenizers), or [TOOL_CALLS]name[ARGS]{...} per call (v11+: Mistral Small 3.x,
//   Devstral, Magistral); text before the tag is content: mistral_calls.h.
// - llama3_json (Llama 3.1/3.2/3.3): an answer that is a tool call starts with the JSON
//   object (after an optional <|python_tag|>, which decoding usually drops as a special
//   token): {"name": "get_weather", "parameters": {"city": "Paris"}}, several separated by
//   ";". Such an answer is held back to its end; if it does not parse as calls, all of it is
//   content. An answer starting with anything else is content, streamed as it comes.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "structured/grammar_compiler.h"

namespace kestrel::server {

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text of the arguments object, as OpenAI sends it
};

struct ToolCallPiece {
  std::string content;
  std::vector<ToolCall> calls;
};

// One per choice: fed the choice's text as it comes.
class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;
  // The parts of `text` (appended to what came before) that are final now.
  virtual ToolCallPiece feed(std::string_view text) = 0;
  // What was held back, at the end of the output.
  virtual ToolCallPiece finish() = 0;
  // feed(text), and with `last` (the output ends with it) finish() added on.
  ToolCallPiece take(std::string_view text, bool last);
};

// REQUIRES: known_tool_call_parser(name).
std::unique_ptr<ToolCallParser> make_tool_call_parser(const std::string& name);

// {"name": string, "arguments" (or "parameters"): object, JSON text or absent} as a call;
// nullopt for anything else.
std::optional<ToolCall> tool_call_of(const nlohmann::ordered_json& j);

// How parser `name` marks up calls, for tool_choice "required" and named functions, whose
// output is constrained to calls in that markup (structured::StructuredOutputSpec); nullopt
// for pythonic, whose Python arguments the constraints do not express.
// REQUIRES: known_tool_call_parser(name).
std::optional<structured::ToolCallMarkup> tool_call_markup(const std::string& name);

// The names --tool-call-parser takes.
bool known_tool_call_parser(const std::string& name);

}  // namespace kestrel::server
