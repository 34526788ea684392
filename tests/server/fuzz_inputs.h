// Inputs of the server fuzz test (fuzz_test.cc): valid request bodies of every POST endpoint
// that between them use every field docs/server.md documents, and the structural and byte
// mutations made from them. Deterministic: every random choice comes from campaign()'s seed.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "fuzz_values.h"

namespace kestrel::server_test::fuzz {

using ojson = nlohmann::ordered_json;

struct Base {
  std::string path;
  ojson body;
};

// One request the campaign sends.
struct Input {
  std::string path;
  std::string body;
  std::string content_type = "application/json";
  std::string what;  // how it was made, for the failure message
};

inline const ojson kTools = ojson::parse(R"([{"type": "function", "function": {
  "name": "get_weather", "description": "Weather of a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
                 "required": ["city"]}}}])");

inline const ojson kSchema = ojson::parse(
    R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"enum": ["x", "y"]}},
        "required": ["a"]})");

// Every documented field of every POST endpoint appears in at least one of these. Each is
// answered 200 as it is (the test checks that first). max_tokens stays at 1 or 2.
inline std::vector<Base> bases() {
  const char* msgs = R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Weather?"}, {"type": "text", "text": "In Oslo"}]},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
    {"role": "user", "content": "Thanks"}])";
  const char* items = R"([
    {"role": "developer", "content": "Be brief."},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
    {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "Call the tool."}]},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"},
    {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"},
    {"role": "assistant", "content": [{"type": "output_text", "text": "It is sunny."}]},
    {"role": "user", "content": "Thanks"}])";
  const ojson m = ojson::parse(msgs);
  const ojson sampling = {{"temperature", 0.8}, {"top_p", 0.9}, {"top_k", 20},
                          {"min_p", 0.05},      {"seed", 7},    {"repetition_penalty", 1.1}};
  auto with = [](ojson a, const ojson& b) {
    for (auto it = b.begin(); it != b.end(); ++it) a[it.key()] = it.value();
    return a;
  };
  std::vector<Base> b;
  const std::string c = "/v1/completions", chat = "/v1/chat/completions", r = "/v1/responses";
  b.push_back({c, with(sampling, ojson::parse(R"({"model": "tiny-qwen3", "prompt": "Hello world",
      "max_tokens": 2, "presence_penalty": 0.5, "frequency_penalty": -0.5, "n": 2, "best_of": 2,
      "stop": ["\n", "xyz"], "stop_token_ids": [151643], "ignore_eos": false, "min_tokens": 1,
      "skip_special_tokens": true, "logprobs": 2, "echo": true, "prompt_logprobs": 1,
      "logit_bias": {"100": 5, "200": -100}, "add_special_tokens": true,
      "include_stop_str_in_output": false, "user": "u", "stream": false})"))});
  b.push_back({c, ojson::parse(R"({"prompt": ["a b", "c"], "max_tokens": 2, "stream": true,
      "stream_options": {"include_usage": true, "continuous_usage_stats": true}, "logprobs": 1,
      "echo": true, "n": 2, "seed": 1, "stop": "zz", "temperature": 0})")});
  b.push_back({c, ojson::parse(R"({"prompt": [[9707, 1879], [151643, 0, 1]], "max_tokens": 2,
      "response_format": {"type": "json_schema", "json_schema": {"name": "s", "strict": true,
      "description": "d", "schema": {"type": "object"}}}, "guided_decoding_backend": "xgrammar"})")});
  b.push_back(
      {c, ojson{{"prompt", {9707, 1879, 11}}, {"max_tokens", 2}, {"guided_json", kSchema}}});
  b.push_back(
      {c, ojson::parse(R"({"prompt": "x", "max_tokens": 2, "guided_regex": "[a-z]{1,3}"})")});
  b.push_back(
      {c, ojson::parse(R"({"prompt": "x", "max_tokens": 2, "guided_choice": ["yes", "no"]})")});
  b.push_back({c, ojson::parse(R"({"prompt": "x", "max_tokens": 2, "stream": true,
      "structured_outputs": {"choice": ["yes", "no"]}})")});
  b.push_back(
      {c, ojson::parse(
              R"({"prompt": "x", "max_tokens": 2, "response_format": {"type": "json_object"}})")});
  b.push_back(
      {chat, with(sampling, ojson{{"model", "tiny-qwen3"},
                                  {"messages", m},
                                  {"max_completion_tokens", 2},
                                  {"max_tokens", 2},
                                  {"logprobs", true},
                                  {"top_logprobs", 2},
                                  {"n", 2},
                                  {"stop", {"\n"}},
                                  {"tools", kTools},
                                  {"tool_choice", "auto"},
                                  {"parallel_tool_calls", false},
                                  {"chat_template_kwargs", {{"enable_thinking", false}}},
                                  {"add_generation_prompt", true},
                                  {"continue_final_message", false},
                                  {"documents", ojson::parse(R"([{"title": "t", "text": "x"}])")},
                                  {"response_format", {{"type", "text"}}},
                                  {"ignore_eos", true},
                                  {"stop_token_ids", {151645}},
                                  {"logit_bias", {{"5", 1}}},
                                  {"skip_special_tokens", false},
                                  {"add_special_tokens", false},
                                  {"user", "u"},
                                  {"store", false},
                                  {"metadata", {{"k", "v"}}},
                                  {"service_tier", "auto"},
                                  {"stream", false}})});
  b.push_back({chat, ojson{{"messages", m},
                           {"max_tokens", 2},
                           {"tools", kTools},
                           {"tool_choice", "required"},
                           {"stream", true},
                           {"stream_options",
                            {{"include_usage", true}, {"continuous_usage_stats", false}}}}});
  b.push_back({chat, ojson{{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                           {"max_tokens", 2},
                           {"tools", kTools},
                           {"tool_choice",
                            {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}}});
  b.push_back(
      {chat,
       ojson{{"messages", {{{"role", "user"}, {"content", "hi"}}}},
             {"max_tokens", 2},
             {"prompt_logprobs", 1},
             {"response_format",
              {{"type", "json_schema"}, {"json_schema", {{"name", "s"}, {"schema", kSchema}}}}},
             {"chat_template",
              "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"}}});
  b.push_back({chat, ojson::parse(R"({"messages": [{"role": "user", "content": "hi"},
      {"role": "assistant", "content": "Sure"}], "continue_final_message": true,
      "add_generation_prompt": false, "max_tokens": 1, "guided_choice": ["a", "b"]})")});
  b.push_back(
      {r,
       with(
           sampling,
           ojson{
               {"model", "tiny-qwen3"},
               {"input", "Hello"},
               {"instructions", "Be brief."},
               {"max_output_tokens", 2},
               {"store", false},
               {"metadata", {{"a", "b"}}},
               {"user", "u"},
               {"service_tier", "auto"},
               {"truncation", "disabled"},
               {"background", false},
               {"include", ojson::array()},
               {"reasoning", {{"effort", "low"}, {"summary", "auto"}}},
               {"text", {{"format", {{"type", "text"}}}, {"verbosity", "low"}}},
               {"tools",
                ojson::parse(
                    R"([{"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": false}])")},
               {"tool_choice", "auto"},
               {"parallel_tool_calls", true},
               {"chat_template_kwargs", {{"enable_thinking", false}}},
               {"prompt_cache_key", "k"},
               {"safety_identifier", "s"},
               {"stream", false}})});
  b.push_back({r, ojson{{"input", ojson::parse(items)},
                        {"max_output_tokens", 2},
                        {"stream", true},
                        {"stream_options", {{"include_obfuscation", false}}},
                        {"include", {"reasoning.encrypted_content"}}}});
  b.push_back(
      {r,
       ojson{{"input", "hi"},
             {"max_output_tokens", 2},
             {"text",
              {{"format",
                {{"type", "json_schema"}, {"name", "s"}, {"schema", kSchema}, {"strict", true}}}}},
             {"tools",
              ojson::parse(
                  R"([{"type": "function", "name": "f", "parameters": {"type": "object"}}])")}}});
  b.push_back(
      {r, ojson{{"input", "hi"},
                {"max_output_tokens", 2},
                {"tools",
                 ojson::parse(
                     R"([{"type": "function", "name": "f", "parameters": {"type": "object"}}])")},
                {"tool_choice", {{"type", "function"}, {"name", "f"}}}}});
  // Anthropic's Messages API: every block type and field it takes, streamed and not.
  const std::string msg = "/v1/messages";
  b.push_back({msg, ojson::parse(R"({"model": "tiny-qwen3", "max_tokens": 2, "system": [
      {"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
      "messages": [{"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": ""},
          {"type": "text", "text": "a"},
          {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "x"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
          "content": [{"type": "text", "text": "ok"}], "is_error": false},
          {"type": "text", "text": "more"}]}],
      "tools": [{"name": "get_weather", "description": "d", "input_schema": {"type": "object",
        "properties": {"city": {"type": "string"}}}}],
      "tool_choice": {"type": "auto", "disable_parallel_tool_use": true},
      "stop_sequences": ["zz"], "temperature": 0.5, "top_p": 0.9, "top_k": 5, "seed": 3,
      "metadata": {"user_id": "u"}, "thinking": {"type": "disabled"}, "service_tier": "auto",
      "stream": false})")});
  b.push_back({msg, ojson::parse(R"({"max_tokens": 2, "stream": true,
      "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
      "tools": [{"name": "f", "input_schema": {"type": "object"}}],
      "tool_choice": {"type": "tool", "name": "f"}})")});
  b.push_back({"/v1/messages/count_tokens",
               ojson::parse(R"({"system": "s", "messages": [{"role": "user", "content": "hi"}]})")});
  b.push_back(
      {"/tokenize",
       ojson::parse(R"({"model": "tiny-qwen3", "prompt": "Hello", "add_special_tokens": true})")});
  b.push_back(
      {"/tokenize", ojson{{"messages", m},
                          {"add_generation_prompt", true},
                          {"continue_final_message", false},
                          {"add_special_tokens", false},
                          {"tools", kTools},
                          {"chat_template_kwargs", {{"enable_thinking", false}}},
                          {"documents", ojson::parse(R"([{"title": "t", "text": "x"}])")}}});
  b.push_back({"/detokenize",
               ojson::parse(R"({"model": "tiny-qwen3", "tokens": [9707, 1879, 0, 151643, 220]})")});
  return b;
}

// Every JSON pointer into `j` (objects' members and arrays' elements, at any depth).
inline void pointers(const ojson& j, const ojson::json_pointer& at,
                     std::vector<ojson::json_pointer>& out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      out.push_back(at / it.key());
      pointers(it.value(), at / it.key(), out);
    }
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) {
      out.push_back(at / i);
      pointers(j[i], at / i, out);
    }
  }
}

inline const std::string kMark = "@@FUZZ_MARK@@";

// `body` with the value at `p` replaced by the raw JSON text `raw`.
inline std::string replaced(ojson body, const ojson::json_pointer& p, const std::string& raw) {
  body[p] = kMark;
  std::string text = body.dump();
  text.replace(text.find("\"" + kMark + "\""), kMark.size() + 2, raw);
  return text;
}

// `body` with several values replaced; nullopt when one lies inside another one replaced.
inline std::optional<std::string> replaced_all(
    ojson body, const std::vector<std::pair<ojson::json_pointer, std::string>>& changes) {
  std::vector<std::string> marks;
  for (size_t i = 0; i < changes.size(); ++i) {
    if (!body.contains(changes[i].first)) return std::nullopt;
    marks.push_back("\"" + kMark + std::to_string(i) + "\"");
    body[changes[i].first] = kMark + std::to_string(i);
  }
  std::string text = body.dump();
  for (size_t i = 0; i < changes.size(); ++i) {
    const size_t at = text.find(marks[i]);
    if (at == std::string::npos) return std::nullopt;  // replaced by a later change
    text.replace(at, marks[i].size(), changes[i].second);
  }
  return text;
}

inline std::string dropped(ojson body, const ojson::json_pointer& p) {
  ojson& parent = body[p.parent_pointer()];
  if (parent.is_object()) {
    parent.erase(p.back());
  } else {
    parent.erase(std::stoul(p.back()));
  }
  return body.dump();
}

// The object at `p` with its first key repeated at its front holding `raw`.
inline std::string duplicate_key(const ojson& body, const ojson::json_pointer& p,
                                 const std::string& raw) {
  const ojson& obj = body[p];
  const std::string key = ojson(obj.begin().key()).dump();
  return replaced(body, p, "{" + key + ": " + raw + ", " + obj.dump().substr(1));
}

// The campaign: every mutation of `bases` and the fixed edge cases, in a fixed order; the
// seeded choices come from `seed`.
inline std::vector<Input> campaign(const std::vector<Base>& bases, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::vector<std::string> values = raw_values();
  std::vector<Input> inputs;
  auto pick = [&rng](size_t n) { return size_t(rng() % n); };
  for (size_t bi = 0; bi < bases.size(); ++bi) {
    const Base& b = bases[bi];
    const std::string text = b.body.dump();
    const std::string tag = "base " + std::to_string(bi);
    std::vector<ojson::json_pointer> ptrs;
    pointers(b.body, ojson::json_pointer(), ptrs);
    for (const auto& p : ptrs) {
      const bool top = p.parent_pointer().empty();
      inputs.push_back(
          {b.path, dropped(b.body, p), "application/json", tag + " drop " + p.to_string()});
      // Top-level members get every value; deeper ones a seeded sample of them.
      for (size_t vi = 0; vi < values.size(); ++vi) {
        if (!top && pick(8) != 0) continue;
        inputs.push_back({b.path, replaced(b.body, p, values[vi]), "application/json",
                          tag + " " + p.to_string() + " = value " + std::to_string(vi)});
      }
      if (b.body[p].is_object() && !b.body[p].empty()) {
        for (const char* raw : {"null", "\"a\"", "1e309"}) {
          inputs.push_back({b.path, duplicate_key(b.body, p, raw), "application/json",
                            tag + " duplicate first key of " + p.to_string()});
        }
      }
    }
    inputs.push_back({b.path, duplicate_key(b.body, ojson::json_pointer(), "null"),
                      "application/json", tag + " duplicate first key"});
    // Several members changed at once (stream with n and logprobs, ...).
    for (int i = 0; i < 40; ++i) {
      std::vector<std::pair<ojson::json_pointer, std::string>> changes;
      for (int k = 0, n = 2 + int(pick(3)); k < n; ++k)
        changes.emplace_back(ptrs[pick(ptrs.size())], values[pick(values.size())]);
      if (const std::optional<std::string> body = replaced_all(b.body, changes))
        inputs.push_back({b.path, *body, "application/json", tag + " several members"});
    }
    // Byte-level: truncations, flips, invalid UTF-8 anywhere, other Content-Types.
    for (int i = 0; i < 12; ++i) {
      inputs.push_back(
          {b.path, text.substr(0, pick(text.size())), "application/json", tag + " truncated"});
      std::string flipped = text;
      for (int k = 0, n = 1 + int(pick(3)); k < n; ++k) flipped[pick(flipped.size())] = char(rng());
      inputs.push_back({b.path, flipped, "application/json", tag + " byte flips"});
      std::string bad = text;
      bad.insert(pick(bad.size()),
                 std::vector<std::string>{"\xff", "\xc0\x80", "\xed\xa0\x80"}[pick(3)]);
      inputs.push_back({b.path, bad, "application/json", tag + " invalid UTF-8"});
    }
    for (const char* type :
         {"text/plain", "", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
          "application/json; charset=latin1"}) {
      inputs.push_back({b.path, text, type, tag + " content type"});
    }
    inputs.push_back({b.path, "\xef\xbb\xbf" + text, "application/json", tag + " BOM"});
    inputs.push_back({b.path, text + " x", "application/json", tag + " trailing garbage"});
    inputs.push_back({b.path, text + text, "application/json", tag + " two objects"});
  }
  // The structured-output compiler's edges: schemas on both endpoints, regexes, choices.
  for (const std::string& schema : raw_schemas()) {
    inputs.push_back({"/v1/completions",
                      R"({"prompt": "x", "max_tokens": 2, "guided_json": )" + schema + "}",
                      "application/json", "guided_json"});
    inputs.push_back(
        {"/v1/chat/completions",
         R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, )"
         R"("response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": )" +
             schema + "}}}",
         "application/json", "json_schema"});
  }
  for (const std::string& grammar : raw_grammars()) {
    inputs.push_back({"/v1/completions",
                      ojson{{"prompt", "x"}, {"max_tokens", 2}, {"guided_grammar", grammar}}.dump(),
                      "application/json", "guided_grammar"});
  }
  for (const std::string& regex : raw_regexes()) {
    inputs.push_back({"/v1/completions",
                      R"({"prompt": "x", "max_tokens": 2, "guided_regex": ")" + regex + "\"}",
                      "application/json", "guided_regex"});
  }
  // Many of one thing: tools under a forced call (their patterns' summed size), messages, stop
  // strings, choices, stop token ids, prompts.
  auto many = [](int n, const std::function<ojson(int)>& item) {
    ojson a = ojson::array();
    for (int i = 0; i < n; ++i) a.push_back(item(i));
    return a;
  };
  const ojson hi = {{{"role", "user"}, {"content", "hi"}}};
  for (const char* choice : {"required", "auto"}) {
    inputs.push_back({"/v1/chat/completions",
                      ojson{{"messages", hi},
                            {"max_tokens", 1},
                            {"chat_template", "x"},
                            {"tool_choice", choice},
                            {"tools", many(2000,
                                           [](int i) {
                                             return ojson{{"type", "function"},
                                                          {"function",
                                                           {{"name", "f" + std::to_string(i)},
                                                            {"parameters", {{"type", "object"}}}}}};
                                           })}}
                          .dump(),
                      "application/json", "2,000 tools"});
  }
  inputs.push_back(
      {"/v1/chat/completions",
       ojson{{"messages", many(20000, [&](int) { return hi[0]; })}, {"max_tokens", 1}}.dump(),
       "application/json", "20,000 messages"});
  inputs.push_back({"/v1/completions",
                    ojson{{"prompt", "x"},
                          {"max_tokens", 2},
                          {"stop", many(50000, [](int i) { return "s" + std::to_string(i); })}}
                        .dump(),
                    "application/json", "50,000 stop strings"});
  inputs.push_back(
      {"/v1/completions",
       ojson{{"prompt", "x"},
             {"max_tokens", 2},
             {"guided_choice", many(20000, [](int i) { return "c" + std::to_string(i); })}}
           .dump(),
       "application/json", "20,000 choices"});
  inputs.push_back({"/v1/completions",
                    ojson{{"prompt", "x"},
                          {"max_tokens", 2},
                          {"stop_token_ids", many(100000, [](int i) { return i; })}}
                        .dump(),
                    "application/json", "100,000 stop token ids"});
  inputs.push_back(
      {"/v1/completions",
       ojson{{"prompt", many(5000, [](int) { return ojson::array({1}); })}, {"max_tokens", 1}}
           .dump(),
       "application/json", "5,000 prompts"});
  // Whole bodies that are no request at all, on every endpoint.
  for (const std::string path : {"/v1/completions", "/v1/chat/completions", "/v1/responses",
                                 "/v1/messages", "/tokenize", "/detokenize"}) {
    for (const std::string& body : std::vector<std::string>{
             "null", "[]", "1e309", "\"x\"", "{", "}", "{\"a\"", std::string(100'000, '['),
             std::string("\0", 1), std::string(100'000, '{'), "{\"prompt\": \"\xff\"}",
             "{\"\\u0000\": 1}", " "}) {
      inputs.push_back({path, body, "application/json", "whole body"});
    }
    std::string big = R"({"prompt": ")";
    big.append(1'100'000, 'a').append("\"}");
    inputs.push_back({path, big, "application/json", "body over --max-body-bytes"});
  }

  return inputs;
}

}  // namespace kestrel::server_test::fuzz
