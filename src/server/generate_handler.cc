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
#include "server/output_pieces.h"
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

// A chat choice's deltas split as every endpoint splits them (output_pieces.h), back into
// the delta's fields; null where there is nothing to split (no reasoning parser, no tools).
std::unique_ptr<OutputPieces> chat_split(const ServerState& state, const ResponseMeta& meta,
                                         const GenerateRequest& req) {
  if (!meta.reasoning && !meta.tool_calls) return nullptr;
  return std::make_unique<OutputPieces>(state, req, false);
}

struct StreamSession {
  StreamSession(ServerState& state, std::string id, GenerateRequest req, Clock::time_point arrival)
      : guard(state),
        meta(make_meta(state, req, id)),
        gen(*state.loop, std::move(id), std::move(req), arrival),
        echoed(meta.echo ? gen.num_choices() : 0, false),
        state(state) {
    for (int i = 0; i < gen.num_choices(); ++i) splits.push_back(chat_split(state, meta, gen.request()));
  }

  InflightGuard guard;
  ResponseMeta meta;
  Generation gen;
  std::vector<std::unique_ptr<OutputPieces>> splits;  // per choice (chat_split)
  // Echo: whether the choice's prompt went out. Without logprobs it goes at once; with them,
  // in the choice's first delta, after the engine computed the prompt's logprobs.
  std::vector<bool> echoed;
  ServerState& state;
  const std::function<std::string()> new_call_id = [this] { return state.new_tool_call_id(); };
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
      if (splits[d.index]) splits[d.index]->take_into(d, new_call_id);
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
  for (ChoiceDelta& c : choices) {
    const std::unique_ptr<OutputPieces> split = chat_split(state, meta, gen.request());
    if (split) split->take_into(c, [&state] { return state.new_tool_call_id(); });
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
