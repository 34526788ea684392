// POST /v1/messages: Anthropic's Messages API request, read as the equivalent chat request
// (as responses_request.h does for OpenAI's Responses API).
//
// The body is checked field by field (a 400 naming the field for each mistake and for each
// feature this server does not have: images, documents, server tools, ...), then rewritten as
// a /v1/chat/completions body: `system` becomes a first system message; each message's
// content blocks become chat messages (a user turn's tool_result blocks tool messages, in
// order, before its text; an assistant turn's thinking its reasoning_content, its tool_use
// blocks tool_calls); tools the chat form (input_schema as parameters); tool_choice any /
// tool / none required / a named function / none; stop_sequences stop; thinking
// chat_template_kwargs.enable_thinking. That body goes through parse_chat_request, so the
// prompt, sampling and constraints are the chat endpoint's to the byte. docs/server.md lists
// the fields.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/request_parser.h"

namespace kestrel::server {

struct MessagesRequest {
  GenerateRequest generate;  // what the engine runs (n = 1, chat = true)
  bool stream = false;
  std::vector<std::string> stop_sequences;  // to tell a stop_sequence from an end_turn
};

// The /v1/chat/completions body equivalent to a Messages body. Throws a 400 ApiError naming
// the field for a malformed or unsupported field, or an unknown one.
nlohmann::ordered_json messages_to_chat_body(const nlohmann::ordered_json& body);

// The whole request: messages_to_chat_body, then parse_chat_request; the chat parser's
// errors come back naming the Messages field (stop_sequences, tools[i].input_schema, ...).
MessagesRequest parse_messages_request(const nlohmann::ordered_json& body,
                                       const ServingContext& ctx);

}  // namespace kestrel::server
