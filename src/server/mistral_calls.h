// Mistral's tool calls (`--tool-call-parser mistral`), in both of its tokenizers' markups:
// - v0.3 tokenizers (Mistral 7B v0.3, Mixtral 8x22B): [TOOL_CALLS] then a JSON list of
//   {"name", "arguments"} objects: [TOOL_CALLS][{"name": "f", "arguments": {"a": 1}}];
// - v11+ tokenizers (Mistral Small 3.1/3.2, Devstral, Magistral): each call as
//   [TOOL_CALLS]name[ARGS]{"a": 1}, several back to back, and in some a call id in between:
//   [TOOL_CALLS]name[CALL_ID]a1b2c3d4e[ARGS]{...} (the id is dropped: the server makes its own).
// [TOOL_CALLS] and [ARGS] are special tokens, so the chat endpoint keeps special tokens in the
// text of a request with tools under this parser unless it says skip_special_tokens (as vLLM
// does). Text before the first [TOOL_CALLS] is content, streamed as it comes; from the tag on
// the answer is held to its end and parsed whole; if it is not calls, all of it is content.
// An answer that starts with a JSON list is taken as v0.3 calls whose tag decoding dropped.
#pragma once

#include <memory>

#include "server/tool_calls.h"

namespace kestrel::server {

std::unique_ptr<ToolCallParser> make_mistral_parser();

// Mistral's chat templates refuse call ids that are not 9 letters or digits: the id of the
// call numbered `n` (0, 1, ...) of a server whose ids are salted with `salt`.
std::string mistral_call_id(uint64_t salt, uint64_t n);

}  // namespace kestrel::server
