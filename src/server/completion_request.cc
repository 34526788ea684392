// POST /v1/completions: prompt as a string, a list of strings, a list of token ids or a list
// of token-id lists.
#include <algorithm>

#include "core/error.h"
#include "server/api_error.h"
#include "server/request_fields.h"
#include "server/request_parser.h"

namespace kestrel::server {
namespace {

std::vector<int> encode(const ServingContext& ctx, const std::string& text,
                        bool add_special_tokens) {
  if (ctx.tokenizer == nullptr) {
    throw_bad_request("prompt", "this model has no tokenizer: give the prompt as token ids");
  }
  try {
    return ctx.tokenizer->encode(text, add_special_tokens);
  } catch (const Error& e) {
    throw_bad_request("prompt", "the prompt cannot be tokenized: {}", e.what());
  }
}

std::vector<int> token_ids(const nlohmann::ordered_json& list) {
  std::vector<int> ids;
  ids.reserve(list.size());
  for (const auto& x : list) {
    if (!x.is_number_integer()) {
      throw_bad_request("prompt", "'prompt' token lists must hold integers, got {}",
                        json_type_name(x));
    }
    // The JSON text, not get<int64_t>(): ids past INT64_MAX (2^64 - 1) would read as negative.
    if (x.is_number_unsigned() ? x.get<uint64_t>() > INT32_MAX
                               : x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX) {
      throw_bad_request("prompt", "'prompt' has token id {} outside the vocabulary", x.dump());
    }
    ids.push_back(x.get<int>());
  }
  return ids;
}

void read_prompts(const FieldReader& f, const ServingContext& ctx, bool add_special_tokens,
                  GenerateRequest& req) {
  const nlohmann::ordered_json* prompt = f.find("prompt");
  if (!prompt) throw_bad_request("prompt", "'prompt' is required");
  auto add_text = [&](const std::string& text) {
    req.prompts.push_back(encode(ctx, text, add_special_tokens));
    req.prompt_texts.push_back(text);
  };
  if (prompt->is_string()) {
    add_text(prompt->get<std::string>());
    return;
  }
  if (!prompt->is_array()) {
    throw_bad_request("prompt",
                      "'prompt' must be a string, a list of strings, a list of token ids "
                      "or a list of token-id lists, got {}",
                      json_type_name(*prompt));
  }
  if (prompt->empty()) throw_bad_request("prompt", "'prompt' must not be an empty list");
  const nlohmann::ordered_json& first = prompt->front();
  if (first.is_number_integer()) {
    req.prompts.push_back(token_ids(*prompt));
    req.prompt_texts.emplace_back();
    return;
  }
  for (const auto& item : *prompt) {
    if (first.is_string() && item.is_string()) {
      add_text(item.get<std::string>());
    } else if (first.is_array() && item.is_array()) {
      req.prompts.push_back(token_ids(item));
      req.prompt_texts.emplace_back();
    } else {
      throw_bad_request("prompt",
                        "'prompt' must be a string, a list of strings, a list of token "
                        "ids or a list of token-id lists");
    }
  }
}

}  // namespace

GenerateRequest parse_completion_request(const nlohmann::ordered_json& body,
                                         const ServingContext& ctx) {
  const FieldReader f(body);
  f.reject_unknown({// OpenAI
                    "model", "prompt", "best_of", "echo", "frequency_penalty", "logit_bias",
                    "logprobs", "max_tokens", "n", "presence_penalty", "seed", "stop", "stream",
                    "stream_options", "suffix", "temperature", "top_p", "user",
                    // vLLM's extensions
                    "top_k", "min_p", "repetition_penalty", "stop_token_ids", "ignore_eos",
                    "min_tokens", "skip_special_tokens", "include_stop_str_in_output",
                    "add_special_tokens", "response_format", "guided_json", "guided_regex",
                    "guided_choice", "guided_grammar", "guided_decoding_backend",
                    "guided_whitespace_pattern", "structured_outputs", "prompt_logprobs"});
  check_model(f, ctx);
  GenerateRequest req;
  const std::optional<int> max_tokens = read_sampling_fields(f, ctx, req);
  req.echo = f.boolean("echo").value_or(false);
  if (auto v = f.int32("logprobs")) {
    req.logprobs = true;
    req.params.logprobs = *v;
  }
  if (auto suffix = f.string("suffix"); suffix && !suffix->empty()) {
    throw_bad_request("suffix", "'suffix' is not supported");
  }
  read_prompt_logprobs(f, req);
  if (req.echo && req.logprobs) {
    // OpenAI's and vLLM's echo with logprobs: each choice's logprobs cover the prompt's
    // tokens first, with as many alternatives as the generated ones.
    req.params.prompt_logprobs =
        std::max(req.params.prompt_logprobs.value_or(0), *req.params.logprobs);
  }
  read_prompts(f, ctx, f.boolean("add_special_tokens").value_or(true), req);
  if (req.echo && ctx.tokenizer) {
    for (size_t i = 0; i < req.prompts.size(); ++i) {
      if (req.prompt_texts[i].empty()) req.prompt_texts[i] = ctx.tokenizer->decode(req.prompts[i]);
    }
  }
  // Unset: 16 tokens (fewer where the context ends first), OpenAI's and vLLM's default for
  // completions; chat completions run to the context's end, as vLLM's do (docs/server.md).
  finish_request(ctx, max_tokens, "prompt", req, kDefaultCompletionMaxTokens);
  return req;
}

}  // namespace kestrel::server
