// POST /v1/messages (Anthropic's Messages API, over the chat path: messages_request.h) and
// POST /v1/messages/count_tokens. Errors on these routes come in Anthropic's shape
// (messages_format.h anthropic_error_body); http_server.cc reshapes them by path.
#pragma once

#include <httplib.h>

#include "server/server_state.h"

namespace kestrel::server {

void handle_messages(ServerState& state, const httplib::Request& req, httplib::Response& res);
// {"input_tokens": N}: the prompt the same body would run, tokenized.
void handle_count_tokens(ServerState& state, const httplib::Request& req, httplib::Response& res);

// True for the paths whose errors take Anthropic's shape.
bool is_messages_path(const std::string& path);

}  // namespace kestrel::server
