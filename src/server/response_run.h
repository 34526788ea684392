// ResponseRun: one Responses API response being generated: the engine request (a
// Generation), and the builder its text goes to after the chat path's reasoning and
// tool-call parsers split it (responses_format.h), kept in the response store at its end
// when the request asks to store it. Driven by the request's handler thread
// (responses_handler.cc) or, for a background response, by BackgroundResponses' thread:
// one thread at a time.
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "server/answer_body.h"
#include "server/generation.h"
#include "server/output_pieces.h"
#include "server/responses_format.h"
#include "server/responses_request.h"
#include "server/server_state.h"

namespace kestrel::server {

class ResponseRun {
 public:
  using Events = ResponseBuilder::Events;

  // `items`: the conversation it answers (response_store.h), kept with the response.
  ResponseRun(ServerState& state, ResponsesRequest request, std::string id,
              Clock::time_point arrival, nlohmann::ordered_json items);

  Generation& gen() { return gen_; }
  ResponseBuilder& builder() { return builder_; }
  const std::string& id() const { return gen_.id(); }

  // Waits up to `timeout` for the model's next text; returns the events it makes (the last
  // ones, response.completed or response.failed, once the generation is done). At the end
  // the response is stored (with store): whole, or failed where it runs in the background
  // (a request's own client sees a failure in its answer; a background one polls for it).
  Events poll(std::chrono::milliseconds timeout = kPollInterval);

  // Stores the response as it stands with `status` ("queued" before a background response
  // runs, "in_progress" once it does) and a copy of its items, for GET to find.
  void store_as(const char* status);
  // Ends a response not done as "cancelled", with the usage so far, and stores it. Its
  // engine request is aborted when the run is destroyed.
  void cancel();
  // Ends it as "failed" with `message` (something past the engine broke), and stores it;
  // returns response.failed.
  Events fail(const std::string& message);

 private:
  static void append(Events& out, Events more);
  ResponseUsage usage() const;

  ServerState& state_;
  const bool store_, background_;
  nlohmann::ordered_json items_;
  ResponseBuilder builder_;
  Generation gen_;
  OutputPieces pieces_;
};

}  // namespace kestrel::server
