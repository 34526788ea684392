// The `input` of a Responses request as chat messages, as vLLM's serving_responses turns
// it: a string is one user message; a list holds messages ({"role", "content"}, with or
// without "type": "message"), function_call items (a call the assistant made), their
// function_call_output items, and reasoning items (the assistant's earlier thinking).
#pragma once

#include <nlohmann/json.hpp>

namespace kestrel::server {

// Appends `input`'s messages to `messages` (a JSON list, which may already hold the
// instructions' system message). Content parts (input_text, output_text) become chat text
// parts; "developer" messages become "system" ones (most chat templates know no other);
// a function_call joins the assistant message just before it (its text or reasoning, or
// the calls before it) as one of its tool_calls, as the chat request for the same turn
// would hold them; a reasoning item starts an assistant message with `reasoning_content`
// (the name chat templates read). Throws a 400 ApiError naming "input" for a malformed or
// unsupported item (images, files, item references), with the item's place in the message.
void append_input_messages(const nlohmann::ordered_json& input, nlohmann::ordered_json& messages);

}  // namespace kestrel::server
