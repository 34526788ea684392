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

Events ResponseRun::poll(std::chrono::milliseconds timeout) {
  Events out;
  for (ChoiceDelta& d : gen_.poll(timeout)) {
    const bool last = !d.finish_reason.empty();
    if (d.finish_reason == "error") {
      append(out, builder_.fail(gen_.error()));
      if (store_ && background_) state_.responses->put(builder_.response(), std::move(items_));
      continue;
    }
    if (gen_.request().logprobs) {
      const nlohmann::json entries = token_logprob_entries(meta_, d.logprobs);
      for (const auto& e : entries) pending_logprobs_.push_back(ojson(e));
    }
    take(d.text, last, out);
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

void ResponseRun::take(const std::string& text, bool last, Events& out) {
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

// Tokens the parsers took as thinking or calls (a delta with no answer text besides them)
// are not the answer's: their logprobs are dropped. (Where a delta's tokens were split
// between thinking and answer, all of them go with the answer's text.)
void ResponseRun::add_text(const std::string& text, bool split_off, Events& out) {
  if (text.empty()) {
    if (split_off) pending_logprobs_ = ojson::array();
    return;
  }
  append(out, builder_.add_text(text, std::move(pending_logprobs_)));
  pending_logprobs_ = ojson::array();
}

ResponseUsage ResponseRun::usage() const {
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

}  // namespace kestrel::server
