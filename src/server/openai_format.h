// The JSON the OpenAI API returns: full responses and streamed chunks of
// /v1/completions ("text_completion") and /v1/chat/completions ("chat.completion",
// "chat.completion.chunk"), with usage and logprobs in each endpoint's own format.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/generation.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::server {

struct ResponseMeta {
  std::string id;       // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
  bool chat = false;
  bool logprobs = false;       // the request asked for logprobs
  bool include_usage = false;  // streaming: "usage": null in every chunk, usage chunk at the end
  // streaming with include_usage: every chunk's "usage" is the usage so far (the handler
  // fills it in) instead of null.
  bool continuous_usage = false;
  bool reasoning = false;      // chat with a reasoning parser: reasoning_content beside content
  bool tool_calls = false;     // chat with tools and a tool-call parser: message.tool_calls
  bool parallel_tool_calls = true;  // false: only a choice's first call (keep_first_tool_call)
  const Tokenizer* tokenizer = nullptr;  // token strings; null: "token_id:<id>"
};

nlohmann::json usage_json(int prompt_tokens, int completion_tokens);

// Appends a later delta of the same choice to `into` (non-streaming responses collect the
// deltas of a choice into one).
void append_delta(ChoiceDelta& into, const ChoiceDelta& delta);

// parallel_tool_calls false (vLLM's maybe_filter_parallel_tool_calls): drops the calls in
// `delta` other than its choice's first (call number 0), with their ids. Works on a
// streamed delta (first_tool_call says which calls it holds) and on a whole choice.
void keep_first_tool_call(ChoiceDelta& delta);

// One SSE chunk for one choice's delta.
nlohmann::json stream_chunk(const ResponseMeta& meta, const ChoiceDelta& delta);
// Chat's first chunk of a choice: {"delta": {"role": "assistant", "content": ""}}.
nlohmann::json role_chunk(const ResponseMeta& meta, int index);
// The final usage chunk ("choices": []).
nlohmann::json usage_chunk(const ResponseMeta& meta, int prompt_tokens, int completion_tokens);

// The whole response; choices[i] holds choice i's collected deltas. `echo_prefix[i]` is
// prepended to completions' text (echo).
nlohmann::json full_response(const ResponseMeta& meta, const std::vector<ChoiceDelta>& choices,
                             const std::vector<std::string>& echo_prefix, int prompt_tokens,
                             int completion_tokens);

// "data: <json>\n\n"
std::string sse_event(const nlohmann::json& data);

}  // namespace kestrel::server
