// Parsing of /v1/completions and /v1/chat/completions bodies into what the engine runs.
//
// Everything a client can get wrong is found here, before anything is queued: malformed
// fields (400 naming the field), unknown fields (400, as OpenAI rejects them), values out
// of range (400 with SamplingParams::validate's message), prompts that are empty or do not
// fit the context (400), an unknown model name (404). docs/server.md lists the fields.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "kestrel/sampling_params.h"
#include "structured/after_reasoning.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::structured {
class GrammarCompiler;
}

namespace kestrel::server {

// Model facts the parsers need. Immutable while the server runs.
struct ServingContext {
  const Tokenizer* tokenizer = nullptr;         // null: token-id prompts only
  const ChatTemplate* chat_template = nullptr;  // null: no chat endpoint
  // Compiles structured-output requests (thread-safe); null without a tokenizer.
  structured::GrammarCompiler* grammars = nullptr;
  SamplingParams defaults;                      // generation_config.json's values
  int vocab_size = 0;
  int max_model_len = 0;  // longest sequence the engine runs (prompt + output)
  std::string served_model_name;
  std::string tool_call_parser;  // --tool-call-parser; empty: tool calls are not parsed
  // --reasoning-parser: a chat's structured output constrains the answer after the thinking
  // (structured/after_reasoning.h), unless structured_outputs_in_reasoning. The tags' token
  // ids; -1 where the tokenizer has no such single token (the constraint then starts at once).
  bool reasoning = false;
  bool structured_outputs_in_reasoning = false;
  structured::ThinkTags think_tags;
};

struct GenerateRequest {
  std::vector<std::vector<int>> prompts;  // one engine request each
  std::vector<std::string> prompt_texts;  // completions with echo: each prompt as text
  // Shared by the prompts, except max_tokens: max_tokens[i] for prompt i (the request's
  // value, or what is left of the context). Stop strings and skip_special_tokens included.
  SamplingParams params;
  std::vector<int> max_tokens;
  // The field that gave max_tokens, as the client named it (max_completion_tokens or
  // max_tokens), for the errors about it.
  std::string max_tokens_field = "max_tokens";
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // stream_options.continuous_usage_stats (vLLM's), only with include_usage: every chunk
  // carries the usage so far.
  bool continuous_usage = false;
  // Completions: prepend the prompt text; with logprobs, the prompt tokens' entries come
  // first in each choice's logprobs (params.prompt_logprobs asks the engine for them).
  bool echo = false;
  bool chat = false;
  // Chat asks with logprobs=true (+ top_logprobs); completions with logprobs=<int>.
  // Either way params.logprobs holds the number of top entries.
  bool logprobs = false;
  // vLLM's prompt_logprobs (0..20): a prompt_logprobs list in each choice (completions) or
  // in the response (chat), with this many most likely tokens per position. Not with stream
  // (0 is let through there, and returns nothing, as in vLLM).
  std::optional<int> prompt_logprobs;
  // Chat with `tools` and tool_choice other than "none": a tool-call parser may read calls
  // out of the answer (tool_calls.h).
  bool tools = false;
  // Chat: parallel_tool_calls. False keeps only each choice's first tool call (and forced
  // calls are constrained to one).
  bool parallel_tool_calls = true;
  // Chat with a reasoning parser: the prompt leaves a <think> open (a template that starts
  // the thinking, or continue_final_message inside it), so the output begins as thinking.
  bool thinking_open = false;
};

GenerateRequest parse_completion_request(const nlohmann::ordered_json& body,
                                         const ServingContext& ctx);
GenerateRequest parse_chat_request(const nlohmann::ordered_json& body, const ServingContext& ctx);

// An HTTP request body as JSON, for every endpoint that takes one. Throws ApiError 400 for
// text that is not JSON, and past core/json_parse.h's bounds: nesting deeper than 64 levels
// (deeply nested input would exhaust the stack of the recursive code that later walks it:
// chat templates, JSON output) and objects of so many keys that parsing them is quadratic.
nlohmann::ordered_json parse_request_body(const std::string& text);

// max_tokens of a completion request that gives none (OpenAI's and vLLM's default).
constexpr int kDefaultCompletionMaxTokens = 16;

// Shared by both parsers (request_sampling.cc).
class FieldReader;
// 404 unless `model` is absent or the served model name.
void check_model(const FieldReader& f, const ServingContext& ctx);
// Reads the fields both endpoints take into req.params (starting from ctx.defaults, and
// compiling a structured-output constraint, structured_request.h) and the streaming flags.
// Returns the requested max_tokens (chat's
// max_completion_tokens first, then max_tokens), if any.
std::optional<int> read_sampling_fields(const FieldReader& f, const ServingContext& ctx,
                                        GenerateRequest& req);
// Reads vLLM's prompt_logprobs into req.prompt_logprobs and req.params.prompt_logprobs
// (a 400 naming it when out of [0, 20], or above 0 with stream). After read_sampling_fields.
void read_prompt_logprobs(const FieldReader& f, GenerateRequest& req);
// Most sequences (prompts x n) one request may ask for.
constexpr size_t kMaxSequencesPerRequest = 4096;
// Validates params, checks each prompt against the vocabulary and the context and the
// request's sequences against kMaxSequencesPerRequest, and fills req.max_tokens. `prompt_param` names the field for errors ("prompt", "messages"). A
// max_tokens given that overruns the context is a 400; unset, each prompt gets
// `unset_max_tokens` (nullopt: no cap) or what is left of the context, whichever is less.
void finish_request(const ServingContext& ctx, std::optional<int> max_tokens,
                    const std::string& prompt_param, GenerateRequest& req,
                    std::optional<int> unset_max_tokens = std::nullopt);

}  // namespace kestrel::server
