#include "server/tool_choice.h"

#include <string>

#include "server/api_error.h"
#include "server/request_fields.h"
#include "server/structured_request.h"
#include "server/tool_calls.h"

namespace kestrel::server {
namespace {

using ojson = nlohmann::ordered_json;

constexpr const char* kForms =
    "'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}";

// The tool's function name; throws unless tools[i] is {"type": "function", "function":
// {"name": string, "parameters": object (optional)}}.
std::string checked_tool_name(const ojson& tool, size_t i) {
  const auto fn = tool.find("function");
  if (string_member(tool, "type") != "function" || fn == tool.end() || !fn->is_object() ||
      !fn->contains("name") || !(*fn)["name"].is_string()) {
    throw_bad_request("tools", "tools[{}] must be {{\"type\": \"function\", \"function\": "
                               "{{\"name\": ..., \"parameters\": ...}}}}", i);
  }
  if (fn->contains("parameters") && !(*fn)["parameters"].is_object()) {
    throw_bad_request("tools", "tools[{}].function.parameters must be an object", i);
  }
  return (*fn)["name"].get<std::string>();
}

}  // namespace

void check_tools(const ojson& tools) {
  for (size_t i = 0; i < tools.size(); ++i) checked_tool_name(tools[i], i);
}

void force_tool_calls(const ojson& tool_choice, const ojson* tools, const ServingContext& ctx,
                      GenerateRequest& req) {
  if (tool_choice == "none" || tool_choice == "auto") return;
  std::string named;  // empty: "required"
  if (tool_choice.is_object()) {
    const auto fn = tool_choice.find("function");
    if (string_member(tool_choice, "type") != "function" || fn == tool_choice.end() ||
        !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
      throw_bad_request("tool_choice", "'tool_choice' must be {}", kForms);
    }
    named = (*fn)["name"].get<std::string>();
    // Empty would read as "required" below.
    if (named.empty()) throw_bad_request("tool_choice", "'tool_choice' names no function (\"\")");
  } else if (tool_choice != "required") {
    throw_bad_request("tool_choice", "'tool_choice' must be {}, got {}", kForms,
                      tool_choice.dump());
  }
  const std::string what = named.empty() ? "'required'" : "a named function";
  if (tools == nullptr || !tools->is_array() || tools->empty()) {
    throw_bad_request("tool_choice", "tool_choice {} needs a non-empty 'tools' list", what);
  }
  if (ctx.tool_call_parser.empty()) {
    throw_bad_request("tool_choice",
                      "tool_choice {} needs the server started with --tool-call-parser", what);
  }
  if (req.params.constraint != nullptr) {
    throw_bad_request("tool_choice",
                      "tool_choice {} and a structured output (response_format or guided_*) "
                      "both constrain the output: give one", what);
  }
  const std::optional<structured::ToolCallMarkup> markup = tool_call_markup(ctx.tool_call_parser);
  if (!markup) {
    throw_bad_request("tool_choice",
                      "tool_choice {} is not supported with --tool-call-parser {}: its calls' "
                      "Python arguments cannot be constrained; use 'auto'",
                      what, ctx.tool_call_parser);
  }
  structured::StructuredOutputSpec spec;
  spec.kind = structured::StructuredOutputSpec::Kind::kToolCalls;
  spec.markup = *markup;
  spec.tools = ojson::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    const std::string name = checked_tool_name((*tools)[i], i);
    if (named.empty() || name == named) spec.tools.push_back((*tools)[i]);
  }
  if (spec.tools.empty()) {
    throw_bad_request("tool_choice", "tool_choice names function '{}', which is not in 'tools'",
                      named);
  }
  // A named function gets one call; so does "required" with parallel_tool_calls false, so
  // that no tokens go to calls the response would drop.
  spec.max_calls = !named.empty() || !req.parallel_tool_calls ? 1 : 0;
  req.params.constraint = compile_structured_output(ctx, spec, "tool_choice");
  req.tools = true;
}

}  // namespace kestrel::server
