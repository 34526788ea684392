#include "server/openai_format.h"

#include <algorithm>

namespace kestrel::server {
namespace {

using json = nlohmann::json;

std::string token_string(const ResponseMeta& meta, int id) {
  if (meta.tokenizer == nullptr) return fmt::format("token_id:{}", id);
  return meta.tokenizer->decode(std::span<const int>(&id, 1), false);
}

json token_bytes(const ResponseMeta& meta, int id) {
  json bytes = json::array();
  const std::string text =
      meta.tokenizer ? std::string(meta.tokenizer->token_bytes(id)) : token_string(meta, id);
  for (unsigned char c : text) bytes.push_back(int(c));
  return bytes;
}

// Legacy completions format: parallel lists, top_logprobs as {token: logprob} maps.
json completion_logprobs(const ResponseMeta& meta, const ChoiceDelta& d, size_t offset_base) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  for (size_t i = 0; i < d.logprobs.size(); ++i) {
    const TokenLogprobs& lp = d.logprobs[i];
    tokens.push_back(token_string(meta, lp.token_id));
    token_logprobs.push_back(lp.logprob);
    json entry = json::object();
    for (const auto& [id, logprob] : lp.top) entry[token_string(meta, id)] = logprob;
    // vLLM lists the sampled token too, even when it is not among the top ones.
    entry[token_string(meta, lp.token_id)] = lp.logprob;
    top.push_back(std::move(entry));
    offsets.push_back(offset_base + (i < d.text_offsets.size() ? d.text_offsets[i] : 0));
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top},
          {"text_offset", offsets}};
}

json chat_logprobs(const ResponseMeta& meta, const ChoiceDelta& d) {
  json content = json::array();
  for (const TokenLogprobs& lp : d.logprobs) {
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
  return {{"content", content}};
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

json usage_json(int prompt_tokens, int completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
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

void keep_first_tool_call(ChoiceDelta& d) {
  const size_t keep = d.first_tool_call == 0 ? std::min<size_t>(1, d.tool_calls.size()) : 0;
  d.tool_calls.erase(d.tool_calls.begin() + keep, d.tool_calls.end());
  if (d.tool_call_ids.size() > keep) {
    d.tool_call_ids.erase(d.tool_call_ids.begin() + keep, d.tool_call_ids.end());
  }
}

json stream_chunk(const ResponseMeta& meta, const ChoiceDelta& d) {
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
    choice["text"] = d.text;
    choice["logprobs"] = meta.logprobs ? completion_logprobs(meta, d, 0) : json(nullptr);
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

json usage_chunk(const ResponseMeta& meta, int prompt_tokens, int completion_tokens) {
  json chunk = envelope(meta, meta.chat ? "chat.completion.chunk" : "text_completion");
  chunk["choices"] = json::array();
  chunk["usage"] = usage_json(prompt_tokens, completion_tokens);
  return chunk;
}

json full_response(const ResponseMeta& meta, const std::vector<ChoiceDelta>& choices,
                   const std::vector<std::string>& echo_prefix, int prompt_tokens,
                   int completion_tokens) {
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
      const std::string& prefix = i < echo_prefix.size() ? echo_prefix[i] : std::string();
      choice["text"] = prefix + d.text;
      choice["logprobs"] = meta.logprobs ? completion_logprobs(meta, d, 0) : json(nullptr);
    }
    choice["finish_reason"] = finish_reason(d);
    choice["stop_reason"] = d.stop_reason;
    list.push_back(std::move(choice));
  }
  out["choices"] = std::move(list);
  out["usage"] = usage_json(prompt_tokens, completion_tokens);
  return out;
}

std::string sse_event(const json& data) {
  return "data: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

}  // namespace kestrel::server
