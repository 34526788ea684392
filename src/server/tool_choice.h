// tool_choice in a chat request, as OpenAI defines it: "none" (calls are not parsed),
// "auto" (the model decides; its calls are parsed), "required" (one or more calls), or
// {"type": "function", "function": {"name": N}} (exactly one call to N). The last two
// constrain sampling to calls in the --tool-call-parser's markup, with arguments valid
// under the tool's parameters schema (structured::StructuredOutputSpec::kToolCalls), so
// the parser always finds them (finish_reason "tool_calls").
#pragma once

#include <nlohmann/json.hpp>

#include "server/request_parser.h"

namespace kestrel::server {

// Throws a 400 ApiError naming the first entry of `tools` (a JSON array) that is not
// {"type": "function", "function": {"name": string, "parameters": object (optional)}}:
// every chat request's tools, whatever its tool_choice, reach the template as given.
void check_tools(const nlohmann::ordered_json& tools);

// Applies a "required" or named tool_choice to req (params.constraint, tools); with
// req.parallel_tool_calls false, "required" allows one call only. Throws a 400
// ApiError for a malformed tool_choice or tools list, a named function not in `tools`,
// no `tools`, a server without --tool-call-parser, or another structured-output field in
// the same request. "none" and "auto" change nothing here.
void force_tool_calls(const nlohmann::ordered_json& tool_choice,
                      const nlohmann::ordered_json* tools, const ServingContext& ctx,
                      GenerateRequest& req);

}  // namespace kestrel::server
