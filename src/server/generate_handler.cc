// POST /v1/completions and /v1/chat/completions: parse, queue on the engine loop, answer
// as one JSON body or as an SSE stream.
#include <httplib.h>

#include <chrono>
#include <memory>

#include "core/logging.h"
#include "server/answer_body.h"
#include "server/api_error.h"
#include "server/generation.h"
#include "server/openai_format.h"
#include "server/reasoning.h"
#include "server/server_state.h"

namespace kestrel::server {
namespace {

using json = nlohmann::json;

ResponseMeta make_meta(const ServerState& state, const GenerateRequest& req, std::string id) {
  ResponseMeta meta;
  meta.id = std::move(id);
  meta.created = unix_seconds();
  meta.model = state.ctx.served_model_name;
  meta.chat = req.chat;
  meta.logprobs = req.logprobs;
  meta.top_logprobs = req.params.logprobs.value_or(0);
  meta.echo = req.echo && !req.chat;
  meta.prompt_logprobs = req.prompt_logprobs;
  meta.include_usage = req.include_usage;
  meta.continuous_usage = req.continuous_usage;
  meta.reasoning = req.chat && !state.config.reasoning_parser.empty();
  meta.tool_calls = req.chat && req.tools && !state.config.tool_call_parser.empty();
  meta.parallel_tool_calls = req.parallel_tool_calls;
  meta.tokenizer = state.ctx.tokenizer;
  return meta;
}

// Choice `index`'s prompt: its text, ids and (once computed) prompt logprobs.
ChoicePrompt choice_prompt(const Generation& gen, int index) {
  const GenerateRequest& r = gen.request();
  const int p = index / r.params.n;
  return {r.prompt_texts[p], r.prompts[p], gen.prompt_logprobs(p)};
}

Usage usage(const Generation& gen) {
  return {gen.prompt_tokens(), gen.completion_tokens(), gen.cached_tokens()};
}

// Moves the thinking in d.text into d.reasoning; the held-back rest comes with the last delta.
void split_reasoning(ReasoningSplitter& splitter, ChoiceDelta& d, bool last) {
  ReasoningPiece piece = splitter.take(d.text, last);
  d.reasoning = std::move(piece.reasoning);
  d.text = std::move(piece.content);
}

// The answer's text after the reasoning split, per choice: moves completed tool calls out of
// d.text (with ids) and turns a "stop" with calls into "tool_calls". `seen` counts the choice's
// calls so far. Without parallel_tool_calls only the choice's first call is kept.
void split_tool_calls(ServerState& state, const ResponseMeta& meta, ToolCallParser& parser,
                      int& seen, ChoiceDelta& d, bool last) {
  ToolCallPiece piece = parser.take(d.text, last);
  d.text = std::move(piece.content);
  d.first_tool_call = seen;
  d.tool_calls = std::move(piece.calls);
  seen += static_cast<int>(d.tool_calls.size());
  if (!meta.parallel_tool_calls) keep_first_tool_call(d);
  for (size_t i = 0; i < d.tool_calls.size(); ++i) {
    d.tool_call_ids.push_back(state.new_request_id("chatcmpl-tool-"));
  }
  if (last && seen > 0 && d.finish_reason == "stop") d.finish_reason = "tool_calls";
}

struct StreamSession {
  StreamSession(ServerState& state, std::string id, GenerateRequest req, Clock::time_point arrival)
      : guard(state),
        meta(make_meta(state, req, id)),
        gen(*state.loop, std::move(id), std::move(req), arrival),
        splitters(meta.reasoning ? gen.num_choices() : 0),
        tool_calls_seen(meta.tool_calls ? gen.num_choices() : 0, 0),
        echoed(meta.echo ? gen.num_choices() : 0, false),
        state(state) {
    for (size_t i = 0; i < tool_calls_seen.size(); ++i) {
      tool_parsers.push_back(make_tool_call_parser(state.config.tool_call_parser));
    }
  }

  InflightGuard guard;
  ResponseMeta meta;
  Generation gen;
  std::vector<ReasoningSplitter> splitters;  // per choice, with a reasoning parser
  std::vector<std::unique_ptr<ToolCallParser>> tool_parsers;  // per choice, when tools may be called
  std::vector<int> tool_calls_seen;
  // Echo: whether the choice's prompt went out. Without logprobs it goes at once; with them,
  // in the choice's first delta, after the engine computed the prompt's logprobs.
  std::vector<bool> echoed;
  ServerState& state;
  bool opened = false;
  int completion_tokens_sent = 0;  // over the choices, in the deltas taken so far
  Clock::time_point last_write = Clock::now();

  // A chunk as an SSE event; with continuous usage stats it carries the usage so far.
  std::string event(nlohmann::json chunk) const {
    if (meta.continuous_usage) {
      chunk["usage"] =
          usage_json({gen.prompt_tokens(), completion_tokens_sent, gen.cached_tokens()});
    }
    return sse_event(chunk);
  }

  // One provider call: waits for the next deltas and writes them. False: the client is gone.
  bool pump(httplib::DataSink& sink) {
    std::string out;
    if (!opened) {
      opened = true;
      for (int i = 0; i < gen.num_choices(); ++i) {
        if (meta.chat) {
          out += event(role_chunk(meta, i));
        } else if (meta.echo && !meta.logprobs) {
          ChoiceDelta echo;
          echo.index = i;
          const ChoicePrompt prompt = choice_prompt(gen, i);
          out += event(stream_chunk(meta, echo, &prompt, true));
          echoed[i] = true;
        }
      }
      // Out at once, as vLLM does: the client knows its request is in before it is scheduled.
      if (!out.empty()) {
        last_write = Clock::now();
        return sink.write(out.data(), out.size());
      }
    }
    if (gen.done()) {
      if (meta.include_usage) {
        out += sse_event(usage_chunk(meta, usage(gen)));
      }
      out += "data: [DONE]\n\n";
      if (!sink.write(out.data(), out.size())) return false;
      sink.done();
      return true;
    }
    for (ChoiceDelta& d : gen.poll(kPollInterval)) {
      completion_tokens_sent += static_cast<int>(d.token_ids.size());
      if (d.finish_reason == "error") {
        out += sse_event(error_body(gen.error(), "server_error"));
        continue;
      }
      if (meta.reasoning) split_reasoning(splitters[d.index], d, !d.finish_reason.empty());
      if (meta.tool_calls) {
        split_tool_calls(state, meta, *tool_parsers[d.index], tool_calls_seen[d.index], d,
                         !d.finish_reason.empty());
      }
      const bool first = meta.echo && !echoed[d.index];
      if (d.text.empty() && d.reasoning.empty() && d.tool_calls.empty() &&
          d.finish_reason.empty() && d.logprobs.empty() && !first)
        continue;
      const ChoicePrompt prompt = choice_prompt(gen, d.index);
      out += event(stream_chunk(meta, d, &prompt, first));
      if (first) echoed[d.index] = true;
    }
    return write_or_ping(sink, std::move(out), last_write);
  }
};

void answer_whole(ServerState& state, GenerateRequest req, std::string id,
                  Clock::time_point arrival, const httplib::Request& http_req,
                  httplib::Response& res) {
  auto guard = std::make_shared<InflightGuard>(state);
  const ResponseMeta meta = make_meta(state, req, id);
  Generation gen(*state.loop, std::move(id), std::move(req), arrival);
  std::vector<ChoiceDelta> choices(gen.num_choices());
  for (int i = 0; i < gen.num_choices(); ++i) choices[i].index = i;
  gen.start();
  if (!poll_until_done(gen, http_req, res, [&] {
        for (const ChoiceDelta& d : gen.poll(kPollInterval)) append_delta(choices[d.index], d);
      })) {
    return;
  }
  if (meta.reasoning) {
    for (ChoiceDelta& c : choices) {
      ReasoningSplitter splitter;
      split_reasoning(splitter, c, true);
    }
  }
  if (meta.tool_calls) {
    for (ChoiceDelta& c : choices) {
      const std::unique_ptr<ToolCallParser> parser =
          make_tool_call_parser(state.config.tool_call_parser);
      int seen = 0;
      split_tool_calls(state, meta, *parser, seen, c, true);
    }
  }
  if (!gen.error().empty()) {
    res.status = state.draining ? 503 : 500;
    set_json_body(res, error_body(gen.error(), "server_error"), std::move(guard));
    return;
  }
  std::vector<ChoicePrompt> prompts;
  for (int i = 0; i < gen.num_choices(); ++i) prompts.push_back(choice_prompt(gen, i));
  set_json_body(res, full_response(meta, choices, prompts, usage(gen)), std::move(guard));
}

void answer_stream(ServerState& state, GenerateRequest req, std::string id,
                   Clock::time_point arrival, httplib::Response& res) {
  auto session = std::make_shared<StreamSession>(state, std::move(id), std::move(req), arrival);
  session->gen.start();
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [session](size_t, httplib::DataSink& sink) { return session->pump(sink); },
      // The session (and with it the engine requests, if unfinished) goes when the response
      // does; a client that disconnected makes pump() fail first.
      [session](bool) {});
}

}  // namespace

void handle_generate(ServerState& state, const httplib::Request& http_req, httplib::Response& res,
                     bool chat) {
  const Clock::time_point arrival = Clock::now();
  const nlohmann::ordered_json body = parse_request_body(http_req.body);
  GenerateRequest req =
      chat ? parse_chat_request(body, state.ctx) : parse_completion_request(body, state.ctx);
  std::string id = state.new_request_id(chat ? "chatcmpl-" : "cmpl-");
  KS_LOG_DEBUG("{}: {} prompt(s), {} prompt tokens, n={}, stream={}", id, req.prompts.size(),
               req.prompts[0].size(), req.params.n, req.stream);
  if (req.stream) {
    answer_stream(state, std::move(req), std::move(id), arrival, res);
  } else {
    answer_whole(state, std::move(req), std::move(id), arrival, http_req, res);
  }
}

}  // namespace kestrel::server
