#include "server/responses_handler.h"

#include <httplib.h>

#include <chrono>
#include <memory>
#include <optional>

#include "core/logging.h"
#include "server/answer_body.h"
#include "server/api_error.h"
#include "server/connections.h"
#include "server/generation.h"
#include "server/openai_format.h"
#include "server/reasoning.h"
#include "server/response_items_page.h"
#include "server/response_store.h"
#include "server/responses_format.h"
#include "server/responses_request.h"
#include "server/server_state.h"

namespace kestrel::server {
namespace {

using ojson = nlohmann::ordered_json;
using Events = ResponseBuilder::Events;

// One response being generated: the engine request, and the builder its text goes to after
// the chat path's reasoning and tool-call parsers split it. `items`: the conversation it
// answers (response_store.h), kept with the response when the request asks to store it.
class ResponseRun {
 public:
  ResponseRun(ServerState& state, ResponsesRequest request, std::string id,
              Clock::time_point arrival, ojson items)
      : state_(state),
        store_(request.store),
        items_(std::move(items)),
        builder_(id, unix_seconds(), state.ctx.served_model_name, request.settings,
                 [&state](const char* prefix) { return state.new_request_id(prefix); }),
        parallel_tool_calls_(request.generate.parallel_tool_calls),
        gen_(*state.loop, std::move(id), std::move(request.generate), arrival) {
    if (gen_.request().logprobs) {
      builder_.list_logprobs();
      meta_.tokenizer = state.ctx.tokenizer;
    }
    if (!state.config.reasoning_parser.empty()) reasoning_.emplace();
    if (gen_.request().tools && !state.config.tool_call_parser.empty()) {
      tool_parser_ = make_tool_call_parser(state.config.tool_call_parser);
    }
  }

  Generation& gen() { return gen_; }
  ResponseBuilder& builder() { return builder_; }

  // Waits up to a poll interval for the model's next text; returns the events it makes
  // (the last ones, response.completed or response.failed, once the generation is done).
  Events poll() {
    Events out;
    for (ChoiceDelta& d : gen_.poll(kPollInterval)) {
      const bool last = !d.finish_reason.empty();
      if (d.finish_reason == "error") {
        append(out, builder_.fail(gen_.error()));
        continue;
      }
      if (gen_.request().logprobs) {
        const nlohmann::json entries = token_logprob_entries(meta_, d.logprobs);
        for (const auto& e : entries) pending_logprobs_.push_back(ojson(e));
      }
      take(d.text, last, out);
      if (!last) continue;
      append(out, builder_.finish(d.finish_reason, usage()));
      // Kept before the client sees the end, so that a request continuing from it finds it
      // (a failed response is not kept).
      if (store_) state_.responses->put(builder_.response(), std::move(items_));
    }
    return out;
  }

 private:
  static void append(Events& out, Events more) {
    for (ojson& e : more) out.push_back(std::move(e));
  }

  // As generate_handler.cc splits a chat choice: thinking first, then calls out of the rest.
  void take(const std::string& text, bool last, Events& out) {
    ReasoningPiece piece{std::string(), text};
    if (reasoning_) {
      piece = reasoning_->take(text, last);
      reasoning_text_ += piece.reasoning;
      append(out, builder_.add_reasoning(piece.reasoning));
    }
    if (!tool_parser_) {
      add_text(piece.content, !piece.reasoning.empty(), out);
      return;
    }
    ToolCallPiece calls = tool_parser_->take(piece.content, last);
    add_text(calls.content, !piece.reasoning.empty() || !calls.calls.empty(), out);
    for (const ToolCall& call : calls.calls) {
      // parallel_tool_calls false keeps the first call only, as on the chat path.
      if (parallel_tool_calls_ || calls_seen_ == 0) append(out, builder_.add_function_call(call));
      ++calls_seen_;
    }
  }

  // The answer's text, with the logprobs of the tokens that came since the last text. Tokens
  // the parsers took as thinking or calls (a delta with no answer text besides them) are
  // not the answer's: their logprobs are dropped. (Where a delta's tokens were split between
  // thinking and answer, all of them go with the answer's text.)
  void add_text(const std::string& text, bool split_off, Events& out) {
    if (text.empty()) {
      if (split_off) pending_logprobs_ = ojson::array();
      return;
    }
    append(out, builder_.add_text(text, std::move(pending_logprobs_)));
    pending_logprobs_ = ojson::array();
  }

  ResponseUsage usage() const {
    ResponseUsage u;
    u.input_tokens = gen_.prompt_tokens();
    u.output_tokens = gen_.completion_tokens();
    u.cached_tokens = gen_.cached_tokens();
    // The engine does not tell which tokens were thinking: the thinking's text, tokenized
    // again (a model's own text gives back its tokens, but for the tags).
    if (!reasoning_text_.empty() && state_.ctx.tokenizer != nullptr) {
      const int n = static_cast<int>(state_.ctx.tokenizer->encode(reasoning_text_, false).size());
      u.reasoning_tokens = std::min(n, u.output_tokens);
    }
    return u;
  }

  ServerState& state_;
  bool store_;
  ojson items_;
  ResponseBuilder builder_;
  const bool parallel_tool_calls_;
  Generation gen_;
  std::optional<ReasoningSplitter> reasoning_;
  std::unique_ptr<ToolCallParser> tool_parser_;
  std::string reasoning_text_;
  int calls_seen_ = 0;
  ResponseMeta meta_;  // its tokenizer, for the logprob entries' token strings
  ojson pending_logprobs_ = ojson::array();  // tokens not yet given with answer text
};

void answer_whole(ServerState& state, std::unique_ptr<ResponseRun> run,
                  const httplib::Request& http_req, httplib::Response& res) {
  // Held by the body's provider, so that shutdown waits until the response is written.
  auto guard = std::make_shared<InflightGuard>(state);
  run->gen().start();
  const int connection = find_connection(http_req.local_port, http_req.remote_port);
  while (!run->gen().done()) {
    (void)run->poll();
    if (connection >= 0 && !run->gen().done() && !peer_open(connection)) {
      KS_LOG_DEBUG("{}: the client closed the connection; aborted", run->gen().id());
      res.status = 499;  // nobody reads it; the run's Generation aborts the engine request
      return;
    }
  }
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
    if (out.empty() && Clock::now() - last_write >= kPingInterval) out = ": ping\n\n";
    if (out.empty()) return true;
    last_write = Clock::now();
    return sink.write(out.data(), out.size());
  }
};

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
  auto run = std::make_unique<ResponseRun>(state, std::move(request), std::move(id), arrival,
                                           std::move(items));
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

void get_stored_response(ServerState& state, const std::string& id, httplib::Response& res) {
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

void delete_stored_response(ServerState& state, const std::string& id, httplib::Response& res) {
  if (!state.responses->erase(id)) not_stored(id);
  res.set_content(
      ojson{{"id", id}, {"object", "response.deleted"}, {"deleted", true}}.dump(),
      "application/json");
}

}  // namespace kestrel::server
