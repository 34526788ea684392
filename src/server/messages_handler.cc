#include "server/messages_handler.h"

#include <memory>
#include <utility>

#include "core/logging.h"
#include "server/answer_body.h"
#include "server/generation.h"
#include "server/messages_format.h"
#include "server/messages_request.h"
#include "server/output_pieces.h"

namespace kestrel::server {
namespace {

using ojson = nlohmann::ordered_json;
using Events = MessageBuilder::Events;

// One message being generated: its engine request, the chat path's split of its text, and
// the builder the pieces go to.
struct MessageRun {
  MessageRun(ServerState& state, MessagesRequest request, std::string id, Clock::time_point arrival)
      : stop_sequences(std::move(request.stop_sequences)),
        builder(id, state.ctx.served_model_name,
                [&state](const char* prefix) { return state.new_request_id(prefix); }),
        gen(*state.loop, std::move(id), std::move(request.generate), arrival),
        pieces(state, gen.request()) {}

  // Waits up to `timeout` for the model's next text; the events it makes (the last ones,
  // message_delta and message_stop, once the generation is done). An engine failure is
  // gen.error(), with no events.
  Events poll(std::chrono::milliseconds timeout = kPollInterval) {
    Events out;
    for (const ChoiceDelta& d : gen.poll(timeout)) {
      if (d.finish_reason == "error") continue;
      for (OutputPiece& p : pieces.take(d)) {
        Events more;
        switch (p.kind) {
          case OutputPiece::Kind::kReasoning: more = builder.add_thinking(p.text); break;
          case OutputPiece::Kind::kText: more = builder.add_text(p.text); break;
          case OutputPiece::Kind::kToolCall: more = builder.add_tool_use(p.call); break;
        }
        for (ojson& e : more) out.push_back(std::move(e));
      }
      if (d.finish_reason.empty()) continue;
      MessageUsage usage;
      usage.input_tokens = gen.prompt_tokens();
      usage.cached_tokens = gen.cached_tokens();
      usage.output_tokens = gen.completion_tokens();
      for (ojson& e : builder.finish(d.finish_reason, d.stop_reason, stop_sequences, usage)) {
        out.push_back(std::move(e));
      }
    }
    return out;
  }

  const std::vector<std::string> stop_sequences;
  MessageBuilder builder;
  Generation gen;
  OutputPieces pieces;
};

void answer_whole(ServerState& state, std::unique_ptr<MessageRun> run,
                  const httplib::Request& http_req, httplib::Response& res) {
  auto guard = std::make_shared<InflightGuard>(state);
  run->gen.start();
  if (!poll_until_done(run->gen, http_req, res, [&] { (void)run->poll(); })) return;
  if (!run->gen.error().empty()) {
    res.status = state.draining ? 503 : 500;
    set_json_body(res, anthropic_error_body(res.status, run->gen.error()), std::move(guard));
    return;
  }
  set_json_body(res, run->builder.message(), std::move(guard));
}

// A streamed message: its events as they come, pings while nothing does; an engine failure
// ends the stream with an error event.
struct StreamSession {
  StreamSession(ServerState& state, std::unique_ptr<MessageRun> run)
      : guard(state), run(std::move(run)) {}

  InflightGuard guard;
  std::unique_ptr<MessageRun> run;
  bool opened = false, failed = false;
  Clock::time_point last_write = Clock::now();

  bool pump(httplib::DataSink& sink) {
    Events events;
    if (!opened) {
      opened = true;
      events = run->builder.start(run->gen.prompt_tokens());  // before it is scheduled
    } else if (run->gen.done() && (failed || run->gen.error().empty())) {
      sink.done();
      return true;
    } else {
      events = run->poll();
      if (run->gen.done() && !run->gen.error().empty()) {
        events.push_back(anthropic_error_body(500, run->gen.error()));
        failed = true;
      }
    }
    std::string out;
    for (const ojson& e : events) out += messages_sse_event(e);
    static const std::string kPing = messages_sse_event({{"type", "ping"}});
    return write_or_ping(sink, std::move(out), last_write, kPing);
  }
};

}  // namespace

void handle_messages(ServerState& state, const httplib::Request& http_req, httplib::Response& res) {
  const Clock::time_point arrival = Clock::now();
  MessagesRequest request = parse_messages_request(parse_request_body(http_req.body), state.ctx);
  const bool stream = request.stream;
  std::string id = state.new_request_id("msg_");
  KS_LOG_DEBUG("{}: {} prompt tokens, stream={}", id, request.generate.prompts[0].size(), stream);
  auto run = std::make_unique<MessageRun>(state, std::move(request), std::move(id), arrival);
  if (!stream) {
    answer_whole(state, std::move(run), http_req, res);
    return;
  }
  auto session = std::make_shared<StreamSession>(state, std::move(run));
  session->run->gen.start();
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [session](size_t, httplib::DataSink& sink) { return session->pump(sink); },
      [session](bool) {});
}

void handle_count_tokens(ServerState& state, const httplib::Request& http_req,
                         httplib::Response& res) {
  ojson body = parse_request_body(http_req.body);
  // Anthropic's count_tokens takes the Messages fields but max_tokens, which the chat path
  // needs: any value will do, it changes no prompt token.
  if (body.is_object() && !body.contains("max_tokens")) body["max_tokens"] = 1;
  const MessagesRequest request = parse_messages_request(body, state.ctx);
  const ojson answer = {{"input_tokens", static_cast<int64_t>(request.generate.prompts[0].size())}};
  res.set_content(answer.dump(), "application/json");
}

bool is_messages_path(const std::string& path) { return path.rfind("/v1/messages", 0) == 0; }

}  // namespace kestrel::server
