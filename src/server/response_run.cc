#include "server/response_run.h"

#include <utility>

#include "server/response_store.h"

namespace kestrel::server {

using ojson = nlohmann::ordered_json;
using Events = ResponseRun::Events;

ResponseRun::ResponseRun(ServerState& state, ResponsesRequest request, std::string id,
                         Clock::time_point arrival, ojson items)
    : state_(state),
      store_(request.store),
      background_(request.background),
      items_(std::move(items)),
      builder_(id, unix_seconds(), state.ctx.served_model_name, request.settings,
               [&state](const char* prefix) { return state.new_request_id(prefix); }),
      gen_(*state.loop, std::move(id), std::move(request.generate), arrival),
      pieces_(state, gen_.request()) {
  if (gen_.request().logprobs) builder_.list_logprobs();
}

Events ResponseRun::poll(std::chrono::milliseconds timeout) {
  Events out;
  for (ChoiceDelta& d : gen_.poll(timeout)) {
    const bool last = !d.finish_reason.empty();
    if (d.finish_reason == "error") {
      append(out, builder_.fail(gen_.error()));
      if (store_ && background_) state_.responses->put(builder_.response(), std::move(items_));
      continue;
    }
    for (OutputPiece& p : pieces_.take(d)) {
      switch (p.kind) {
        case OutputPiece::Kind::kReasoning: append(out, builder_.add_reasoning(p.text)); break;
        case OutputPiece::Kind::kText: append(out, builder_.add_text(p.text, std::move(p.logprobs))); break;
        case OutputPiece::Kind::kToolCall: append(out, builder_.add_function_call(p.call)); break;
      }
    }
    if (!last) continue;
    append(out, builder_.finish(d.finish_reason, usage()));
    // Kept before the client sees the end, so that a request continuing from it finds it.
    if (store_) state_.responses->put(builder_.response(), std::move(items_));
  }
  return out;
}

void ResponseRun::store_as(const char* status) {
  if (!store_) return;
  ojson response = builder_.response();
  response["status"] = status;
  state_.responses->put(response, items_);
}

void ResponseRun::cancel() {
  builder_.cancel(usage());
  if (store_) state_.responses->put(builder_.response(), std::move(items_));
}

Events ResponseRun::fail(const std::string& message) {
  Events out = builder_.fail(message);
  if (store_) state_.responses->put(builder_.response(), std::move(items_));
  return out;
}

void ResponseRun::append(Events& out, Events more) {
  for (ojson& e : more) out.push_back(std::move(e));
}

ResponseUsage ResponseRun::usage() const {
  ResponseUsage u;
  u.input_tokens = gen_.prompt_tokens();
  u.output_tokens = gen_.completion_tokens();
  u.cached_tokens = gen_.cached_tokens();
  u.reasoning_tokens = pieces_.reasoning_tokens(u.output_tokens);
  return u;
}

}  // namespace kestrel::server
