#include "server/responses_handler.h"

#include <httplib.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>

#include "core/logging.h"
#include "server/answer_body.h"
#include "server/api_error.h"
#include "server/background_responses.h"
#include "server/generation.h"
#include "server/openai_format.h"
#include "server/reasoning.h"
#include "server/response_items_page.h"
#include "server/response_run.h"
#include "server/response_store.h"
#include "server/responses_format.h"
#include "server/responses_request.h"
#include "server/server_state.h"

namespace kestrel::server {
namespace {

using ojson = nlohmann::ordered_json;
using Events = ResponseBuilder::Events;

void answer_whole(ServerState& state, std::unique_ptr<ResponseRun> run,
                  const httplib::Request& http_req, httplib::Response& res) {
  // Held by the body's provider, so that shutdown waits until the response is written.
  auto guard = std::make_shared<InflightGuard>(state);
  run->gen().start();
  if (!poll_until_done(run->gen(), http_req, res, [&] { (void)run->poll(); })) return;
  ojson body = run->builder().response();
  if (!run->gen().error().empty()) {
    res.status = state.draining ? 503 : 500;
    body = error_body(run->gen().error(), "server_error");
  }
  set_json_body(res, body, std::move(guard));
}

// A streamed response: its events as they come, pings while nothing does.
struct StreamSession {
  StreamSession(ServerState& state, std::unique_ptr<ResponseRun> run)
      : guard(state), run(std::move(run)) {}

  InflightGuard guard;
  std::unique_ptr<ResponseRun> run;
  bool opened = false;
  Clock::time_point last_write = Clock::now();

  // One provider call. False: the client is gone (the run's destructor aborts the request).
  bool pump(httplib::DataSink& sink) {
    Events events;
    if (!opened) {
      opened = true;
      events = run->builder().start();  // at once, before the request is scheduled
    } else if (run->gen().done()) {
      sink.done();
      return true;
    } else {
      events = run->poll();
    }
    std::string out;
    for (const ojson& e : events) out += responses_sse_event(e);
    return write_or_ping(sink, std::move(out), last_write);
  }
};

// A streamed background response's events from its log (background_responses.h), from
// event `next` on, pings while none come; ends with the log. The run goes on without it.
struct LogSession {
  std::shared_ptr<EventLog> log;
  size_t next = 0;
  Clock::time_point last_write = Clock::now();

  bool pump(httplib::DataSink& sink) {
    auto [events, ended] = log->read(next, kPollInterval);
    next += events.size();
    std::string out;
    for (const ojson& e : events) out += responses_sse_event(e);
    if (out.empty() && ended) {
      sink.done();
      return true;
    }
    return write_or_ping(sink, std::move(out), last_write);
  }
};

void stream_log(httplib::Response& res, std::shared_ptr<EventLog> log, size_t next) {
  auto session = std::make_shared<LogSession>(LogSession{std::move(log), next});
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [session](size_t, httplib::DataSink& sink) { return session->pump(sink); },
      [session](bool) {});
}

}  // namespace

void handle_responses(ServerState& state, const httplib::Request& http_req,
                      httplib::Response& res) {
  const Clock::time_point arrival = Clock::now();
  const ojson body = parse_request_body(http_req.body);
  const ojson previous = body.contains("previous_response_id") ? body["previous_response_id"]
                                                                : ojson(nullptr);
  // The stored conversation before the input (previous_response_id), referenced items in
  // place.
  const ojson resolved = with_stored_items(body, *state.responses);
  ResponsesRequest request = parse_responses_request(resolved, state.ctx);
  request.settings["previous_response_id"] = previous;
  request.store = request.store && state.responses->enabled();
  request.settings["store"] = request.store;
  const bool stream = request.generate.stream;
  std::string id = state.new_request_id("resp_");
  KS_LOG_DEBUG("{}: {} prompt tokens, stream={}", id, request.generate.prompts[0].size(), stream);
  // Every stored item gets an id, so that it can be listed (input_items) and referenced.
  ojson items = request.store ? with_item_ids(input_items(resolved.at("input")),
                                              [&state](const char* prefix) {
                                                return state.new_request_id(prefix);
                                              })
                              : ojson();
  const bool background = request.background;
  if (background && !request.store) {
    throw_bad_request("background",
                      "'background': true needs stored responses, and this server stores none "
                      "(kestrel serve --responses-store-max 0)");
  }
  auto run = std::make_unique<ResponseRun>(state, std::move(request), std::move(id), arrival,
                                           std::move(items));
  if (background && stream) {
    stream_log(res, state.background->start_streamed(std::move(run)), 0);
    return;
  }
  if (background) {
    const ojson queued = state.background->start(std::move(run));
    res.set_content(queued.dump(-1, ' ', false, ojson::error_handler_t::replace),
                    "application/json");
    return;
  }
  if (!stream) {
    answer_whole(state, std::move(run), http_req, res);
    return;
  }
  auto session = std::make_shared<StreamSession>(state, std::move(run));
  session->run->gen().start();
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [session](size_t, httplib::DataSink& sink) { return session->pump(sink); },
      [session](bool) {});
}

namespace {

[[noreturn]] void not_stored(const std::string& id) {
  throw ApiError(404, fmt::format("Response with id '{}' not found.", id), "response_id",
                 "invalid_request_error", "response_not_found");
}

}  // namespace

void get_stored_response(ServerState& state, const std::string& id, const httplib::Request& req,
                         httplib::Response& res) {
  if (req.has_param("stream") && req.get_param_value("stream") != "false") {
    if (req.get_param_value("stream") != "true") {
      throw_bad_request("stream", "'stream' must be true or false, got '{}'",
                        req.get_param_value("stream"));
    }
    // Resuming a streamed background response: its events after `starting_after`.
    int64_t after = -1;
    if (req.has_param("starting_after")) {
      const std::string text = req.get_param_value("starting_after");
      char* end = nullptr;
      errno = 0;
      after = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || errno != 0 || after < -1) {
        throw_bad_request("starting_after",
                          "'starting_after' must be an event's sequence_number (>= 0), got '{}'",
                          text);
      }
    }
    std::shared_ptr<EventLog> log = state.background->log(id);
    if (!log) {
      if (!state.responses->response(id)) not_stored(id);
      throw_bad_request("stream",
                        "response '{}' is not a streamed background response still running: "
                        "GET it without 'stream'",
                        id);
    }
    stream_log(res, std::move(log), static_cast<size_t>(after + 1));
    return;
  }
  const std::optional<ojson> response = state.responses->response(id);
  if (!response) not_stored(id);
  res.set_content(response->dump(-1, ' ', false, ojson::error_handler_t::replace),
                  "application/json");
}

void list_stored_input_items(ServerState& state, const std::string& id,
                             const httplib::Request& req, httplib::Response& res) {
  const std::optional<ojson> items = state.responses->answered_items(id);
  if (!items) not_stored(id);
  auto param = [&req](const char* key) -> std::optional<std::string> {
    if (!req.has_param(key)) return std::nullopt;
    return req.get_param_value(key);
  };
  const ojson page = input_items_page(
      *items, {param("after"), param("before"), param("limit"), param("order")});
  res.set_content(page.dump(-1, ' ', false, ojson::error_handler_t::replace), "application/json");
}

void cancel_response(ServerState& state, const std::string& id, httplib::Response& res) {
  const bool was_running = state.background->cancel(id);
  const std::optional<ojson> response = state.responses->response(id);
  if (!response) not_stored(id);
  if (!was_running && !response->value("background", false)) {
    throw ApiError(400, fmt::format("Response '{}' was not created with 'background': true; "
                                    "only background responses can be cancelled.", id),
                   "response_id");
  }
  res.set_content(response->dump(-1, ' ', false, ojson::error_handler_t::replace),
                  "application/json");
}

void delete_stored_response(ServerState& state, const std::string& id, httplib::Response& res) {
  (void)state.background->cancel(id);  // a background response still running stops first
  if (!state.responses->erase(id)) not_stored(id);
  res.set_content(
      ojson{{"id", id}, {"object", "response.deleted"}, {"deleted", true}}.dump(),
      "application/json");
}

}  // namespace kestrel::server
