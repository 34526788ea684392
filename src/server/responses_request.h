// POST /v1/responses: OpenAI's Responses API request, read as the equivalent chat request.
//
// The body is checked field by field (a 400 naming the field for each mistake, and for each
// feature this server does not have: include other than logprobs, built-in tools, ...; a
// previous_response_id is resolved before this, by response_store.h), then rewritten as a
// /v1/chat/completions body: `instructions` becomes a first system message, `input` items
// become messages (function_call items an assistant message's tool_calls,
// function_call_output items tool messages), flat function tools the chat form,
// `text.format` the response_format, `max_output_tokens` max_completion_tokens. That body
// goes through parse_chat_request, so the prompt, sampling and constraints are the chat
// endpoint's to the byte. docs/server.md lists the fields.
#pragma once

#include <nlohmann/json.hpp>

#include "server/request_parser.h"

namespace kestrel::server {

struct ResponsesRequest {
  GenerateRequest generate;  // what the engine runs (n = 1, chat = true)
  bool store = true;         // `store` (OpenAI's default: true): keep the finished response
  // `background`: answered at once as "queued" (or streamed from there), run to its end past
  // the request (background_responses.h). Only with store (a 400 otherwise).
  bool background = false;
  // What the response object repeats of the request: background, instructions, max_output_tokens,
  // metadata, parallel_tool_calls, reasoning, store, temperature and top_p (the values
  // sampling uses), text, tool_choice, tools, truncation, user.
  nlohmann::ordered_json settings;
};

// The /v1/chat/completions body equivalent to a Responses body. Throws a 400 ApiError
// naming the field for a malformed or unsupported field, or an unknown one.
nlohmann::ordered_json responses_to_chat_body(const nlohmann::ordered_json& body);

// The whole request: responses_to_chat_body, then parse_chat_request; the chat parser's
// errors come back naming the Responses field (input, max_output_tokens, text.format, ...).
ResponsesRequest parse_responses_request(const nlohmann::ordered_json& body,
                                         const ServingContext& ctx);

}  // namespace kestrel::server
