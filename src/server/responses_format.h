// The Responses API's objects: the response ("object": "response") and its output items
// (reasoning, message, function_call), and the server-sent events that stream it
// (response.created ... response.completed), in the shapes of OpenAI's API reference.
//
// One ResponseBuilder per response is told what the model wrote, piece by piece, in the
// order it came: reasoning text, answer text, complete tool calls, then the end. Each call
// returns the stream events it makes (each with "type" and its "sequence_number") and
// updates the response object, so a non-streamed response (the events dropped) equals the
// one response.completed carries. Items open as their first piece comes and close when a
// piece of another kind comes or the response ends:
//   reasoning: output_item.added, content_part.added (reasoning_text), reasoning_text.delta...,
//              reasoning_text.done, content_part.done, output_item.done
//   message:   output_item.added, content_part.added (output_text), output_text.delta...,
//              output_text.done, content_part.done, output_item.done
//   function_call: output_item.added, function_call_arguments.delta (the whole arguments),
//              function_call_arguments.done, output_item.done
// Thread safety: none; one handler thread uses a builder.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "server/tool_calls.h"

namespace kestrel::server {

struct ResponseUsage {
  int input_tokens = 0;
  int output_tokens = 0;
  int reasoning_tokens = 0;  // of output_tokens
  int cached_tokens = 0;     // of input_tokens: served from the prefix cache
};

class ResponseBuilder {
 public:
  using Events = std::vector<nlohmann::ordered_json>;
  // Makes a new unique id with the given prefix ("msg_", "rs_", "fc_", "call_").
  using NewId = std::function<std::string(const char* prefix)>;

  // `settings` (ResponsesRequest::settings) are copied into the response object.
  ResponseBuilder(std::string id, int64_t created_at, std::string model,
                  const nlohmann::ordered_json& settings, NewId new_id);

  // From now on output_text parts (and their done events) carry "logprobs": the entries
  // add_text is given (the request included "message.output_text.logprobs").
  void list_logprobs() { list_logprobs_ = true; }

  Events start();  // response.created, response.in_progress
  // A streamed background response's first events (background_responses.h):
  // response.created and response.queued, status "queued"; in_progress() once it runs.
  Events start_queued();
  Events in_progress();
  Events add_reasoning(std::string_view text) { return add_piece(Open::kReasoning, text, {}); }
  // `logprobs`: the entries of the text's tokens (openai_format.h token_logprob_entries), an
  // array; the delta event carries them.
  Events add_text(std::string_view text,
                  nlohmann::ordered_json logprobs = nlohmann::ordered_json::array()) {
    return add_piece(Open::kMessage, text, std::move(logprobs));
  }
  Events add_function_call(const ToolCall& call);
  // The end of the output. finish_reason is the engine's: "length" makes the response
  // "incomplete" (incomplete_details.reason "max_output_tokens", the open item
  // "incomplete"), "abort" makes it "incomplete" without details; anything else
  // "completed". Ends with response.completed or response.incomplete. An output with no
  // item gets an empty message, so that every response has one.
  Events finish(const std::string& finish_reason, const ResponseUsage& usage);
  // The engine failed: status "failed" with `message` as the error; response.failed.
  Events fail(const std::string& message);
  // Cancelled before its end (a background response, background_responses.h): the open item
  // "incomplete", status "cancelled", the usage so far. Background responses are not
  // streamed, so no event.
  void cancel(const ResponseUsage& usage);

  // The response object as it stands (whole after finish or fail).
  const nlohmann::ordered_json& response() const { return response_; }

 private:
  enum class Open { kNone, kReasoning, kMessage };
  nlohmann::ordered_json event(const char* type, nlohmann::ordered_json fields);
  Events add_piece(Open kind, std::string_view text, nlohmann::ordered_json logprobs);
  nlohmann::ordered_json text_part(bool reasoning, std::string text) const;
  void open(Open kind, Events& out);
  void close(const char* status, Events& out);
  int open_index() const { return static_cast<int>(response_["output"].size()) - 1; }

  nlohmann::ordered_json response_;
  NewId new_id_;
  int sequence_number_ = 0;
  Open open_ = Open::kNone;
  std::string open_text_;  // the open item's text so far
  bool list_logprobs_ = false;
  nlohmann::ordered_json open_logprobs_ = nlohmann::ordered_json::array();  // the open message's
};

// One event as SSE: "event: <type>\ndata: <json>\n\n".
std::string responses_sse_event(const nlohmann::ordered_json& event);

}  // namespace kestrel::server
