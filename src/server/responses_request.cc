#include "server/responses_request.h"

#include <algorithm>
#include <string>
#include <utility>

#include "server/api_error.h"
#include "server/request_fields.h"
#include "server/responses_input.h"

namespace kestrel::server {
namespace {

using ojson = nlohmann::ordered_json;

constexpr const char* kLogprobsInclude = "message.output_text.logprobs";

// Token logprobs of the answer: asked for by including "message.output_text.logprobs", or
// by a top_logprobs other than 0 (the alternatives listed per token, as on the chat endpoint).
bool wants_logprobs(const FieldReader& f) {
  if (f.int32("top_logprobs").value_or(0) != 0) return true;  // the chat parser checks its range
  const ojson* include = f.find("include");
  return include && include->is_array() &&
         std::find(include->begin(), include->end(), kLogprobsInclude) != include->end();
}

[[noreturn]] void not_supported(const std::string& param, const std::string& what) {
  throw_bad_request(param, "{} is not supported by this server", what);
}

// Fields OpenAI defines that this server has no use for: each is a 400 unless absent, null,
// or the value that asks for nothing.
void reject_unsupported(const FieldReader& f) {
  for (const char* key : {"previous_response_id", "conversation", "prompt", "max_tool_calls"}) {
    if (f.find(key)) not_supported(key, fmt::format("'{}'", key));
  }
  // background: true runs the response past the request (background_responses.h), which
  // needs somewhere to keep it.
  if (f.boolean("background").value_or(false) && !f.boolean("store").value_or(true)) {
    throw_bad_request("background", "'background': true needs 'store': true");
  }
  // include: "reasoning.encrypted_content" asks for reasoning that can go back as input
  // without the server storing it (Codex-style clients, with store: false). Reasoning items
  // here carry their text in the clear and are accepted back as input, so there is nothing
  // to add. "message.output_text.logprobs" asks for the answer's token logprobs
  // (wants_logprobs). Anything else it may ask for is not produced.
  if (const ojson* include = f.find("include"); include && !include->is_null()) {
    if (!include->is_array()) {
      throw_bad_request("include", "'include' must be a list, got {}", json_type_name(*include));
    }
    for (const ojson& item : *include) {
      if (!(item.is_string() && (item.get<std::string>() == "reasoning.encrypted_content" ||
                                 item.get<std::string>() == kLogprobsInclude))) {
        not_supported("include", fmt::format("'include' of {}", item.dump()));
      }
    }
  }
  if (const auto truncation = f.string("truncation"); truncation && *truncation != "disabled") {
    not_supported("truncation", fmt::format("'truncation': '{}'", *truncation));
  }
}

// Flat function tools ({"type": "function", "name", ...}) in the chat form.
ojson chat_tools(const ojson& tools) {
  if (!tools.is_array())
    throw_bad_request("tools", "'tools' must be a list, got {}", json_type_name(tools));
  ojson out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = fmt::format("tools[{}]", i);
    const FieldReader t(tools[i], where, where + ".");
    const std::string type = t.string("type").value_or("");
    if (type != "function") {
      throw_bad_request("tools", "{}: tools of type '{}' are not supported (only 'function')",
                        where, type);
    }
    t.reject_unknown({"type", "name", "description", "parameters", "strict"});
    if (t.string("name").value_or("").empty())
      throw_bad_request("tools", "{} needs a 'name'", where);
    (void)t.string("description");
    (void)t.boolean("strict");
    if (const ojson* p = t.find("parameters"); p && !p->is_object()) {
      throw_bad_request("tools", "{}.parameters must be an object", where);
    }
    // The keys in the client's order: the template prints the tool as JSON.
    ojson fn = ojson::object();
    for (const auto& [key, value] : tools[i].items()) {
      if (key != "type") fn[key] = value;
    }
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

ojson chat_tool_choice(const ojson& choice) {
  if (choice == "auto" || choice == "none" || choice == "required") return choice;
  if (string_member(choice, "type") == "function") {
    const FieldReader c(choice, "'tool_choice'", "tool_choice.");
    c.reject_unknown({"type", "name"});
    const std::optional<std::string> name = c.string("name");
    if (!name) throw_bad_request("tool_choice", "'tool_choice' of type 'function' needs a 'name'");
    return {{"type", "function"}, {"function", {{"name", *name}}}};
  }
  throw_bad_request("tool_choice",
                    "'tool_choice' must be 'auto', 'none', 'required' or {{\"type\": \"function\", "
                    "\"name\": ...}}, got {}",
                    choice.dump());
}

// text.format as a chat response_format (null for plain text).
ojson chat_response_format(const ojson& text) {
  const FieldReader t(text, "'text'", "text.");
  t.reject_unknown({"format", "verbosity"});
  (void)t.string("verbosity");  // one length of answer here
  const ojson* format = t.find("format");
  if (!format) return nullptr;
  const FieldReader f(*format, "'text.format'", "text.format.");
  const std::string type = f.string("type").value_or("");
  if (type == "text") return nullptr;
  if (type == "json_object") return {{"type", "json_object"}};
  if (type != "json_schema") {
    throw_bad_request("text.format.type",
                      "'text.format.type' must be 'text', 'json_object' or 'json_schema', got '{}'",
                      type);
  }
  f.reject_unknown({"type", "name", "schema", "strict", "description"});
  ojson schema = {{"name", f.string("name").value_or("")}};
  if (const ojson* s = f.find("schema")) schema["schema"] = *s;
  if (auto d = f.string("description")) schema["description"] = *d;
  if (auto s = f.boolean("strict")) schema["strict"] = *s;
  return {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
}

// 0.6f as 0.6, not 0.6000000238418579.
double shortest(float x) { return std::stod(fmt::format("{}", x)); }

// The chat parser's field names, as the Responses request calls them.
ApiError renamed(const ApiError& e) {
  return with_field_names(e,
                          {{"response_format.json_schema.", "text.format."},
                           {"response_format", "text.format"},
                           {"max_completion_tokens", "max_output_tokens"},
                           {"'messages'", "'input'"}},
                          {{"messages", "input"}, {"max_tokens", "max_output_tokens"}});
}

}  // namespace

ojson responses_to_chat_body(const ojson& body) {
  const FieldReader f(body);
  f.reject_unknown({// OpenAI's
                    "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls",
                    "max_output_tokens", "temperature", "top_p", "stream", "stream_options",
                    "metadata", "user", "store", "text", "reasoning", "service_tier", "truncation",
                    "safety_identifier", "prompt_cache_key", "prompt_cache_retention",
                    "previous_response_id", "background", "include", "conversation", "prompt",
                    "max_tool_calls", "top_logprobs",
                    // vLLM's extensions, as on the chat endpoint
                    "top_k", "min_p", "repetition_penalty", "seed", "chat_template_kwargs"});
  reject_unsupported(f);
  ojson chat = ojson::object();
  for (const char* key :
       {"model", "temperature", "top_p", "stream", "parallel_tool_calls", "user", "store",
        "service_tier", "top_k", "min_p", "repetition_penalty", "seed", "chat_template_kwargs"}) {
    if (const ojson* v = f.find(key)) chat[key] = *v;
  }
  ojson messages = ojson::array();
  if (auto instructions = f.string("instructions")) {
    messages.push_back({{"role", "system"}, {"content", *instructions}});
  }
  const ojson* input = f.find("input");
  if (!input) throw_bad_request("input", "'input' is required");
  append_input_messages(*input, messages);
  chat["messages"] = std::move(messages);
  if (wants_logprobs(f)) {
    chat["logprobs"] = true;
    if (const ojson* top = f.find("top_logprobs")) chat["top_logprobs"] = *top;
  }
  if (const ojson* tools = f.find("tools")) chat["tools"] = chat_tools(*tools);
  if (const ojson* choice = f.find("tool_choice")) chat["tool_choice"] = chat_tool_choice(*choice);
  if (auto max = f.int32("max_output_tokens")) {
    if (*max < 1)
      throw_bad_request("max_output_tokens", "'max_output_tokens' must be >= 1, got {}", *max);
    chat["max_completion_tokens"] = *max;
  }
  if (const ojson* text = f.find("text")) {
    if (ojson format = chat_response_format(*text); !format.is_null())
      chat["response_format"] = format;
  }
  if (const ojson* options = f.find("stream_options")) {
    if (!f.boolean("stream").value_or(false)) {
      throw_bad_request("stream_options", "'stream_options' is only allowed when 'stream' is true");
    }
    const FieldReader o(*options, "'stream_options'", "stream_options.");
    o.reject_unknown({"include_obfuscation"});
    (void)o.boolean("include_obfuscation");  // no obfuscation padding is sent
  }
  if (const ojson* metadata = f.find("metadata")) {
    if (!metadata->is_object()) throw_bad_request("metadata", "'metadata' must be an object");
    for (const auto& [key, value] : metadata->items()) {
      if (!value.is_string()) throw_bad_request("metadata", "'metadata.{}' must be a string", key);
    }
  }
  if (const ojson* reasoning = f.find("reasoning")) {
    const FieldReader r(*reasoning, "'reasoning'", "reasoning.");
    r.reject_unknown({"effort", "summary", "generate_summary"});
    for (const char* key : {"effort", "summary", "generate_summary"}) (void)r.string(key);
  }
  for (const char* key : {"safety_identifier", "prompt_cache_key", "prompt_cache_retention"}) {
    (void)f.string(key);
  }
  return chat;
}

ResponsesRequest parse_responses_request(const ojson& body, const ServingContext& ctx) {
  const ojson chat = responses_to_chat_body(body);
  ResponsesRequest out;
  try {
    out.generate = parse_chat_request(chat, ctx);
  } catch (const ApiError& e) {
    throw renamed(e);
  }
  const FieldReader f(body);
  const auto echo = [&f](const char* key, ojson absent) {
    const ojson* v = f.find(key);
    return v ? *v : absent;
  };
  out.store = f.boolean("store").value_or(true);
  out.background = f.boolean("background").value_or(false);
  ojson text = echo("text", ojson::object());
  if (!text.contains("format") || text["format"].is_null()) text["format"] = {{"type", "text"}};
  out.settings = {
      {"background", out.background},
      {"instructions", echo("instructions", nullptr)},
      {"max_output_tokens", echo("max_output_tokens", nullptr)},
      {"metadata", echo("metadata", ojson::object())},
      {"parallel_tool_calls", out.generate.parallel_tool_calls},
      {"reasoning", echo("reasoning", {{"effort", nullptr}, {"summary", nullptr}})},
      {"store", out.store},
      {"temperature", shortest(out.generate.params.temperature)},
      {"text", std::move(text)},
      {"tool_choice", echo("tool_choice", "auto")},
      {"tools", echo("tools", ojson::array())},
      {"top_logprobs", out.generate.logprobs ? out.generate.params.logprobs.value_or(0) : 0},
      {"top_p", shortest(out.generate.params.top_p)},
      {"truncation", echo("truncation", "disabled")},
      {"user", echo("user", nullptr)},
  };
  return out;
}

}  // namespace kestrel::server
