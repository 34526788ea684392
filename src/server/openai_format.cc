#include "server/openai_format.h"

#include <algorithm>

#include "tokenizer/detokenizer.h"

namespace kestrel::server {
namespace {

using json = nlohmann::json;

std::string token_string(const ResponseMeta& meta, int id) {
  if (meta.tokenizer == nullptr) return fmt::format("token_id:{}", id);
  return meta.tokenizer->decode(std::span<const int>(&id, 1), false);
}

// vLLM's clamp_prompt_logprobs: -inf (a token the logits rule out) as OpenAI's -9999.
double clamp_logprob(float logprob) { return std::max(static_cast<double>(logprob), -9999.0); }

size_t count_chars(std::string_view s) {
  return static_cast<size_t>(std::count_if(
      s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

// Where each prompt token's text starts in the prompt's text, in characters, counted as the
// engine counts generated tokens' text_offsets (an incremental detokenizer: a token that
// completes a character split over tokens starts where that character does). Zeros without
// a tokenizer.
std::vector<size_t> prompt_text_offsets(const ResponseMeta& meta, std::span<const int> ids) {
  std::vector<size_t> offsets(ids.size(), 0);
  if (meta.tokenizer == nullptr) return offsets;
  DetokenizerOptions options;
  options.skip_special_tokens = false;  // the echoed text holds them
  Detokenizer detok(*meta.tokenizer, options);
  size_t chars = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    offsets[i] = chars;
    chars += count_chars(detok.add_token(ids[i]));
  }
  return offsets;
}

// The prompt's part of a completions logprobs object.
void append_prompt_logprobs(const ResponseMeta& meta, const ChoicePrompt& prompt, json& tokens,
                            json& token_logprobs, json& top, json& offsets) {
  const std::vector<size_t> starts = prompt_text_offsets(meta, prompt.token_ids);
  for (size_t i = 0; i < prompt.token_ids.size(); ++i) {
    const int id = prompt.token_ids[i];
    tokens.push_back(token_string(meta, id));
    offsets.push_back(starts[i]);
    if (i == 0 || i > prompt.logprobs.size()) {
      token_logprobs.push_back(nullptr);
      top.push_back(nullptr);
      continue;
    }
    const TokenLogprobs& lp = prompt.logprobs[i - 1];
    token_logprobs.push_back(clamp_logprob(lp.logprob));
    json entry = json::object();
    // The engine computed max(logprobs, prompt_logprobs) alternatives: the first ones.
    const size_t n = std::min(lp.top.size(), static_cast<size_t>(std::max(meta.top_logprobs, 0)));
    for (size_t k = 0; k < n; ++k) {
      entry[token_string(meta, lp.top[k].first)] = clamp_logprob(lp.top[k].second);
    }
    entry[token_string(meta, id)] = clamp_logprob(lp.logprob);
    top.push_back(std::move(entry));
  }
}

json token_bytes(const ResponseMeta& meta, int id) {
  json bytes = json::array();
  const std::string text =
      meta.tokenizer ? std::string(meta.tokenizer->token_bytes(id)) : token_string(meta, id);
  for (unsigned char c : text) bytes.push_back(int(c));
  return bytes;
}

}  // namespace

json token_logprob_entries(const ResponseMeta& meta, std::span<const TokenLogprobs> logprobs) {
  json content = json::array();
  for (const TokenLogprobs& lp : logprobs) {
    json top = json::array();
    for (const auto& [id, logprob] : lp.top) {
      top.push_back({{"token", token_string(meta, id)},
                     {"logprob", logprob},
                     {"bytes", token_bytes(meta, id)}});
    }
    content.push_back({{"token", token_string(meta, lp.token_id)},
                       {"logprob", lp.logprob},
                       {"bytes", token_bytes(meta, lp.token_id)},
                       {"top_logprobs", top}});
  }
  return content;
}

namespace {

json chat_logprobs(const ResponseMeta& meta, const ChoiceDelta& d) {
  return {{"content", token_logprob_entries(meta, d.logprobs)}};
}

json finish_reason(const ChoiceDelta& d) {
  return d.finish_reason.empty() ? json(nullptr) : json(d.finish_reason);
}

// OpenAI's tool_calls list; streamed deltas also carry each call's index in the choice.
json tool_calls_json(const ChoiceDelta& d, bool streamed) {
  json calls = json::array();
  for (size_t i = 0; i < d.tool_calls.size(); ++i) {
    json call = {{"id", i < d.tool_call_ids.size() ? d.tool_call_ids[i] : std::string()},
                 {"type", "function"},
                 {"function", {{"name", d.tool_calls[i].name}, {"arguments", d.tool_calls[i].arguments}}}};
    if (streamed) call["index"] = d.first_tool_call + static_cast<int>(i);
    calls.push_back(std::move(call));
  }
  return calls;
}

json envelope(const ResponseMeta& meta, const char* object) {
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

}  // namespace

json completion_logprobs(const ResponseMeta& meta, const ChoiceDelta& d, const ChoicePrompt* prompt,
                         size_t offset_shift) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  if (prompt != nullptr) {
    append_prompt_logprobs(meta, *prompt, tokens, token_logprobs, top, offsets);
  }
  for (size_t i = 0; i < d.logprobs.size(); ++i) {
    const TokenLogprobs& lp = d.logprobs[i];
    tokens.push_back(token_string(meta, lp.token_id));
    token_logprobs.push_back(lp.logprob);
    json entry = json::object();
    for (const auto& [id, logprob] : lp.top) entry[token_string(meta, id)] = logprob;
    // vLLM lists the sampled token too, even when it is not among the top ones.
    entry[token_string(meta, lp.token_id)] = lp.logprob;
    top.push_back(std::move(entry));
    offsets.push_back(offset_shift + (i < d.text_offsets.size() ? d.text_offsets[i] : 0));
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top},
          {"text_offset", offsets}};
}

json prompt_logprobs_json(const ResponseMeta& meta, const ChoicePrompt& prompt, int top) {
  json list = json::array();
  for (size_t i = 0; i < prompt.token_ids.size(); ++i) {
    if (i == 0 || i > prompt.logprobs.size()) {
      list.push_back(nullptr);
      continue;
    }
    const TokenLogprobs& lp = prompt.logprobs[i - 1];
    auto candidate = [&](int id, float logprob, int rank) {
      return json{{"logprob", clamp_logprob(logprob)},
                  {"rank", rank},
                  {"decoded_token", token_string(meta, id)}};
    };
    json entry = json::object();
    entry[std::to_string(lp.token_id)] = candidate(lp.token_id, lp.logprob, lp.rank);
    const size_t n = std::min(lp.top.size(), static_cast<size_t>(std::max(top, 0)));
    for (size_t k = 0; k < n; ++k) {
      const auto& [id, logprob] = lp.top[k];
      entry[std::to_string(id)] = candidate(id, logprob, static_cast<int>(k) + 1);
    }
    list.push_back(std::move(entry));
  }
  return list;
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

void append_delta(ChoiceDelta& into, const ChoiceDelta& d) {
  into.index = d.index;
  into.text += d.text;
  into.reasoning += d.reasoning;
  into.tool_calls.insert(into.tool_calls.end(), d.tool_calls.begin(), d.tool_calls.end());
  into.tool_call_ids.insert(into.tool_call_ids.end(), d.tool_call_ids.begin(), d.tool_call_ids.end());
  into.token_ids.insert(into.token_ids.end(), d.token_ids.begin(), d.token_ids.end());
  into.logprobs.insert(into.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
  into.text_offsets.insert(into.text_offsets.end(), d.text_offsets.begin(), d.text_offsets.end());
  if (!d.finish_reason.empty()) into.finish_reason = d.finish_reason;
  if (!d.stop_reason.is_null()) into.stop_reason = d.stop_reason;
}

json stream_chunk(const ResponseMeta& meta, const ChoiceDelta& d, const ChoicePrompt* prompt,
                  bool first) {
  json chunk = envelope(meta, meta.chat ? "chat.completion.chunk" : "text_completion");
  json choice = {{"index", d.index}};
  if (meta.chat) {
    json delta = json::object();
    if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
    if (!d.text.empty()) delta["content"] = d.text;
    if (!d.tool_calls.empty()) delta["tool_calls"] = tool_calls_json(d, true);
    choice["delta"] = std::move(delta);
    choice["logprobs"] = meta.logprobs ? chat_logprobs(meta, d) : json(nullptr);
  } else {
    const bool echo = meta.echo && prompt != nullptr;
    choice["text"] = echo && first ? std::string(prompt->text) + d.text : d.text;
    const size_t shift = echo ? count_chars(prompt->text) : 0;
    choice["logprobs"] = meta.logprobs
                             ? completion_logprobs(meta, d, echo && first ? prompt : nullptr, shift)
                             : json(nullptr);
  }
  choice["finish_reason"] = finish_reason(d);
  choice["stop_reason"] = d.stop_reason;
  chunk["choices"] = json::array({choice});
  if (meta.include_usage) chunk["usage"] = nullptr;
  return chunk;
}

json role_chunk(const ResponseMeta& meta, int index) {
  json chunk = envelope(meta, "chat.completion.chunk");
  chunk["choices"] = json::array({{{"index", index},
                                   {"delta", {{"role", "assistant"}, {"content", ""}}},
                                   {"logprobs", nullptr},
                                   {"finish_reason", nullptr}}});
  if (meta.include_usage) chunk["usage"] = nullptr;
  return chunk;
}

json usage_chunk(const ResponseMeta& meta, const Usage& usage) {
  json chunk = envelope(meta, meta.chat ? "chat.completion.chunk" : "text_completion");
  chunk["choices"] = json::array();
  chunk["usage"] = usage_json(usage);
  return chunk;
}

json full_response(const ResponseMeta& meta, const std::vector<ChoiceDelta>& choices,
                   std::span<const ChoicePrompt> prompts, const Usage& usage) {
  json out = envelope(meta, meta.chat ? "chat.completion" : "text_completion");
  json list = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceDelta& d = choices[i];
    json choice = {{"index", d.index}};
    if (meta.chat) {
      choice["message"] = {{"role", "assistant"},
                           {"content", d.text},
                           {"refusal", nullptr},
                           {"tool_calls", tool_calls_json(d, false)}};
      // vLLM's: null for what is absent, where something else may stand in its place.
      if (d.text.empty() && (meta.reasoning || !d.tool_calls.empty())) {
        choice["message"]["content"] = nullptr;
      }
      if (meta.reasoning) {
        choice["message"]["reasoning_content"] = d.reasoning.empty() ? json(nullptr) : json(d.reasoning);
      }
      choice["logprobs"] = meta.logprobs ? chat_logprobs(meta, d) : json(nullptr);
    } else {
      const ChoicePrompt* prompt = meta.echo && i < prompts.size() ? &prompts[i] : nullptr;
      choice["text"] = prompt ? std::string(prompt->text) + d.text : d.text;
      choice["logprobs"] =
          meta.logprobs
              ? completion_logprobs(meta, d, prompt, prompt ? count_chars(prompt->text) : 0)
              : json(nullptr);
    }
    choice["finish_reason"] = finish_reason(d);
    choice["stop_reason"] = d.stop_reason;
    // vLLM's: per choice for completions, once per response for chat (below).
    if (!meta.chat && meta.prompt_logprobs && i < prompts.size()) {
      choice["prompt_logprobs"] = prompt_logprobs_json(meta, prompts[i], *meta.prompt_logprobs);
    }
    list.push_back(std::move(choice));
  }
  out["choices"] = std::move(list);
  if (meta.chat && meta.prompt_logprobs && !prompts.empty()) {
    out["prompt_logprobs"] = prompt_logprobs_json(meta, prompts.front(), *meta.prompt_logprobs);
  }
  out["usage"] = usage_json(usage);
  return out;
}

std::string sse_event(const json& data) {
  return "data: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

}  // namespace kestrel::server
