// POST /v1/responses (OpenAI's Responses API): parsed by responses_request.h into the chat
// path's request, run on the engine loop as a Generation, and answered as one response
// object or as a stream of Responses events (responses_format.h), or, with `background`,
// answered at once and run by BackgroundResponses (background_responses.h). The answer's text is split
// into reasoning, message and function calls by the same reasoning and tool-call parsers
// as chat completions (--reasoning-parser, --tool-call-parser).
#pragma once

#include "server/server_state.h"

namespace kestrel::server {

// Throws ApiError for a bad request (before anything is queued); the route's guard answers it.
void handle_responses(ServerState& state, const httplib::Request& req, httplib::Response& res);

// GET /v1/responses/{id}: the stored response; DELETE: removes it ({"id", "object":
// "response.deleted", "deleted": true}). Both throw a 404 ApiError for an id not stored.
// GET with ?stream=true resumes a streamed background response that still runs: its events
// after ?starting_after=N (a sequence_number; all of them without), then live (a 400 for
// any other response).
void get_stored_response(ServerState& state, const std::string& id, const httplib::Request& req,
                         httplib::Response& res);
void delete_stored_response(ServerState& state, const std::string& id, httplib::Response& res);
// POST /v1/responses/{id}/cancel: a background response still running ends "cancelled"
// (background_responses.h); the response as stored is the answer (a finished background one
// as it ended). 404 for an id not stored, 400 for a response that was not background.
void cancel_response(ServerState& state, const std::string& id, httplib::Response& res);
// GET /v1/responses/{id}/input_items: a page of the items it answered (response_items_page.h;
// the query's after, before, limit and order). 404 for an id not stored, 400 for a bad query.
void list_stored_input_items(ServerState& state, const std::string& id,
                             const httplib::Request& req, httplib::Response& res);

}  // namespace kestrel::server
