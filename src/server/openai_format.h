// The JSON the OpenAI API returns: full responses and streamed chunks of
// /v1/completions ("text_completion") and /v1/chat/completions ("chat.completion",
// "chat.completion.chunk"), with usage and logprobs in each endpoint's own format.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
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
  int top_logprobs = 0;        // with logprobs: the most likely tokens listed per position
  // Completions with echo: the prompt's text comes first, and with logprobs its tokens'
  // entries (ChoicePrompt).
  bool echo = false;
  // vLLM's prompt_logprobs: the prompt's positions with this many most likely tokens each,
  // per choice (completions) or per response (chat).
  std::optional<int> prompt_logprobs;
  bool include_usage = false;  // streaming: "usage": null in every chunk, usage chunk at the end
  // streaming with include_usage: every chunk's "usage" is the usage so far (the handler
  // fills it in) instead of null.
  bool continuous_usage = false;
  bool reasoning = false;      // chat with a reasoning parser: reasoning_content beside content
  bool tool_calls = false;     // chat with tools and a tool-call parser: message.tool_calls
  const Tokenizer* tokenizer = nullptr;  // token strings; null: "token_id:<id>"
};

// A choice's prompt as echo and prompt logprobs show it. Views into the Generation.
struct ChoicePrompt {
  std::string_view text;  // completions' echo: before the choice's text
  std::span<const int> token_ids;
  // Entry i for prompt token i + 1 (RequestOutput::prompt_logprobs); positions it does not
  // cover (the first token's, or all before the engine computed them) are null.
  std::span<const TokenLogprobs> logprobs;
};

// A request's usage, as its handler counts it (Generation).
struct Usage {
  int prompt_tokens = 0;      // over the prompts, once each
  int completion_tokens = 0;  // over the choices
  int cached_tokens = 0;      // of prompt_tokens: served from the prefix cache
};

// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details":
// {"cached_tokens"}}: OpenAI's shape, details always present (vLLM sends them only with
// --enable-prompt-tokens-details, and only when some tokens were cached).
nlohmann::json usage_json(const Usage& usage);

// Appends a later delta of the same choice to `into` (non-streaming responses collect the
// deltas of a choice into one).
void append_delta(ChoiceDelta& into, const ChoiceDelta& delta);

// One SSE chunk for one choice's delta. Completions with echo pass the choice's prompt:
// its first chunk (`first`) carries the prompt's text, and with logprobs its tokens'
// entries, before the delta's (as vLLM's does); every chunk's text offsets count the prompt's
// text.
nlohmann::json stream_chunk(const ResponseMeta& meta, const ChoiceDelta& delta,
                            const ChoicePrompt* prompt = nullptr, bool first = false);
// Chat's first chunk of a choice: {"delta": {"role": "assistant", "content": ""}}.
nlohmann::json role_chunk(const ResponseMeta& meta, int index);
// The final usage chunk ("choices": []).
nlohmann::json usage_chunk(const ResponseMeta& meta, const Usage& usage);

// The whole response; choices[i] holds choice i's collected deltas and prompts[i] its
// prompt (used with echo and prompt_logprobs; may be empty otherwise).
nlohmann::json full_response(const ResponseMeta& meta, const std::vector<ChoiceDelta>& choices,
                             std::span<const ChoicePrompt> prompts, const Usage& usage);

// Chat completions' logprobs entries of these tokens ({token, logprob, bytes, top_logprobs:
// [{token, logprob, bytes}]}), as the Responses API's output_text logprobs list them too.
// Uses meta.tokenizer only.
nlohmann::json token_logprob_entries(const ResponseMeta& meta,
                                     std::span<const TokenLogprobs> logprobs);

// The legacy completions logprobs object ({tokens, token_logprobs, top_logprobs,
// text_offset}) of one choice's delta. With `prompt` (echo): the prompt's tokens first (the
// first one's logprob and top_logprobs null, offsets in the prompt's text from 0), then the
// delta's, their offsets shifted by `offset_shift` characters.
nlohmann::json completion_logprobs(const ResponseMeta& meta, const ChoiceDelta& delta,
                                   const ChoicePrompt* prompt, size_t offset_shift);
// vLLM's prompt_logprobs list: null for the first prompt token, then per token
// {"<id>": {"logprob", "rank", "decoded_token"}} for the token itself and the `top` most
// likely ones.
nlohmann::json prompt_logprobs_json(const ResponseMeta& meta, const ChoicePrompt& prompt, int top);

// "data: <json>\n\n"
std::string sse_event(const nlohmann::json& data);

}  // namespace kestrel::server
