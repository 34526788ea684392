#include "server/messages_request.h"

#include <string>
#include <utility>

#include "server/api_error.h"
#include "server/request_fields.h"

namespace kestrel::server {
namespace {

using ojson = nlohmann::ordered_json;

[[noreturn]] void not_supported(const std::string& param, const std::string& what) {
  throw_bad_request(param, "{} is not supported by this server", what);
}

// A text block's text (cache_control and citations accepted and ignored).
std::string text_block(const FieldReader& b, const std::string& at,
                       const std::string& param = "messages") {
  b.reject_unknown({"type", "text", "cache_control", "citations"});
  const std::optional<std::string> text = b.string("text");
  if (!text) throw_bad_request(param, "{} needs 'text'", at);
  return *text;
}

// The text of a system prompt or a tool_result's content: a string, or text blocks joined
// by newlines.
std::string block_text(const ojson& content, const std::string& where, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    throw_bad_request(param, "{} must be a string or a list of text blocks, got {}", where,
                      json_type_name(content));
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", where, i);
    const FieldReader b(content[i], at, at + ".");
    const std::string type = b.string("type").value_or("");
    if (type != "text") not_supported(param, fmt::format("{}: blocks of type '{}'", at, type));
    if (i > 0) text += '\n';
    text += text_block(b, at, param);
  }
  return text;
}

// A user turn: its tool_result blocks as tool messages, in order, then its text as a user
// message (Anthropic's API puts the results first).
void append_user(const ojson& content, const std::string& where, ojson& messages) {
  ojson parts = ojson::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string at = fmt::format("{}.content[{}]", where, i);
    const FieldReader b(content[i], at, at + ".");
    const std::string type = b.string("type").value_or("");
    if (type == "text") {
      parts.push_back({{"type", "text"}, {"text", text_block(b, at)}});
    } else if (type == "tool_result") {
      b.reject_unknown({"type", "tool_use_id", "content", "is_error", "cache_control"});
      const std::optional<std::string> id = b.string("tool_use_id");
      if (!id) throw_bad_request("messages", "{} needs 'tool_use_id'", at);
      (void)b.boolean("is_error");  // the result's text says what went wrong
      const ojson* result = b.find("content");
      messages.push_back({{"role", "tool"},
                          {"tool_call_id", *id},
                          {"content", result ? block_text(*result, at + ".content", "messages")
                                             : std::string()}});
    } else if (type == "image" || type == "document" || type == "search_result") {
      not_supported("messages", fmt::format("{}: '{}' blocks", at, type));
    } else {
      throw_bad_request("messages", "{}: a user turn's blocks are 'text' or 'tool_result', got '{}'",
                        at, type);
    }
  }
  if (!parts.empty()) messages.push_back({{"role", "user"}, {"content", std::move(parts)}});
}

// An assistant turn: its text, its thinking as reasoning_content, its tool_use blocks as
// tool_calls.
void append_assistant(const ojson& content, const std::string& where, ojson& messages) {
  std::string text, thinking;
  ojson calls = ojson::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string at = fmt::format("{}.content[{}]", where, i);
    const FieldReader b(content[i], at, at + ".");
    const std::string type = b.string("type").value_or("");
    if (type == "text") {
      text += text_block(b, at);
    } else if (type == "thinking") {
      b.reject_unknown({"type", "thinking", "signature"});
      (void)b.string("signature");
      thinking += b.string("thinking").value_or("");
    } else if (type == "redacted_thinking") {
      b.reject_unknown({"type", "data"});  // another server's encrypted thinking: nothing to read
    } else if (type == "tool_use") {
      b.reject_unknown({"type", "id", "name", "input", "cache_control"});
      const std::optional<std::string> id = b.string("id"), name = b.string("name");
      const ojson* input = b.find("input");
      if (!id || !name) throw_bad_request("messages", "{} needs 'id' and 'name'", at);
      if (input && !input->is_object()) {
        throw_bad_request("messages", "{}.input must be an object, got {}", at,
                          json_type_name(*input));
      }
      calls.push_back({{"id", *id},
                       {"type", "function"},
                       {"function",
                        {{"name", *name}, {"arguments", input ? input->dump() : std::string("{}")}}}});
    } else {
      throw_bad_request("messages",
                        "{}: an assistant turn's blocks are 'text', 'thinking' or 'tool_use', got '{}'",
                        at, type);
    }
  }
  ojson turn = {{"role", "assistant"}, {"content", text}};
  if (!thinking.empty()) turn["reasoning_content"] = thinking;
  if (!calls.empty()) turn["tool_calls"] = std::move(calls);
  messages.push_back(std::move(turn));
}

ojson chat_messages(const ojson& list) {
  if (!list.is_array()) {
    throw_bad_request("messages", "'messages' must be a list, got {}", json_type_name(list));
  }
  if (list.empty()) throw_bad_request("messages", "'messages' must not be empty");
  ojson messages = ojson::array();
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = fmt::format("messages[{}]", i);
    const FieldReader m(list[i], where, where + ".");
    m.reject_unknown({"role", "content"});
    const std::string role = m.string("role").value_or("");
    if (role != "user" && role != "assistant") {
      throw_bad_request("messages", "{}.role must be 'user' or 'assistant', got '{}'", where, role);
    }
    const ojson* content = m.find("content");
    if (!content) throw_bad_request("messages", "{} needs 'content'", where);
    if (content->is_string()) {
      messages.push_back({{"role", role}, {"content", *content}});
    } else if (!content->is_array()) {
      throw_bad_request("messages", "{}.content must be a string or a list of blocks, got {}",
                        where, json_type_name(*content));
    } else if (role == "user") {
      append_user(*content, where, messages);
    } else {
      append_assistant(*content, where, messages);
    }
  }
  return messages;
}

ojson chat_tools(const ojson& tools) {
  if (!tools.is_array())
    throw_bad_request("tools", "'tools' must be a list, got {}", json_type_name(tools));
  ojson out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = fmt::format("tools[{}]", i);
    const FieldReader t(tools[i], where, where + ".");
    // Anthropic's own tools (web search, bash, the text editor, ...) carry a versioned type.
    if (const auto type = t.string("type"); type && *type != "custom") {
      not_supported("tools", fmt::format("{}: tools of type '{}' (only custom tools)", where, *type));
    }
    t.reject_unknown({"type", "name", "description", "input_schema", "cache_control"});
    const std::optional<std::string> name = t.string("name");
    if (!name || name->empty()) throw_bad_request("tools", "{} needs a 'name'", where);
    const ojson* schema = t.find("input_schema");
    if (!schema || !schema->is_object()) {
      throw_bad_request("tools", "{} needs an 'input_schema' object", where);
    }
    ojson fn = {{"name", *name}};
    if (auto d = t.string("description")) fn["description"] = *d;
    fn["parameters"] = *schema;
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

void set_tool_choice(const ojson& choice, ojson& chat) {
  const FieldReader c(choice, "'tool_choice'", "tool_choice.");
  c.reject_unknown({"type", "name", "disable_parallel_tool_use"});
  const std::string type = c.string("type").value_or("");
  if (type == "auto") {
    chat["tool_choice"] = "auto";
  } else if (type == "any") {
    chat["tool_choice"] = "required";
  } else if (type == "none") {
    chat["tool_choice"] = "none";
  } else if (type == "tool") {
    const std::optional<std::string> name = c.string("name");
    if (!name) throw_bad_request("tool_choice", "'tool_choice' of type 'tool' needs a 'name'");
    chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", *name}}}};
  } else {
    throw_bad_request("tool_choice",
                      "'tool_choice.type' must be 'auto', 'any', 'tool' or 'none', got '{}'", type);
  }
  if (auto one = c.boolean("disable_parallel_tool_use")) chat["parallel_tool_calls"] = !*one;
}

// thinking as the chat template's enable_thinking (Qwen3's switch; templates without it
// ignore it).
void set_thinking(const ojson& thinking, ojson& chat) {
  const FieldReader t(thinking, "'thinking'", "thinking.");
  t.reject_unknown({"type", "budget_tokens"});
  const std::string type = t.string("type").value_or("");
  if (type != "enabled" && type != "disabled") {
    throw_bad_request("thinking", "'thinking.type' must be 'enabled' or 'disabled', got '{}'", type);
  }
  if (auto budget = t.int32("budget_tokens"); budget && *budget < 1) {
    throw_bad_request("thinking", "'thinking.budget_tokens' must be >= 1, got {}", *budget);
  }
  if (!chat.contains("chat_template_kwargs") || !chat["chat_template_kwargs"].is_object()) {
    chat["chat_template_kwargs"] = ojson::object();  // the chat parser checks a non-object
  }
  chat["chat_template_kwargs"]["enable_thinking"] = type == "enabled";
}

// The chat parser's field names, as the Messages request calls them.
ApiError renamed(const ApiError& e) {
  return with_field_names(e, {{".function.parameters", ".input_schema"}, {"'stop'", "'stop_sequences'"}},
                          {{"stop", "stop_sequences"}});
}

}  // namespace

ojson messages_to_chat_body(const ojson& body) {
  const FieldReader f(body);
  f.reject_unknown({"model", "messages", "max_tokens", "system", "stop_sequences", "stream",
                    "temperature", "top_p", "top_k", "tools", "tool_choice", "metadata",
                    "thinking", "service_tier", "container", "mcp_servers",
                    "context_management",
                    // vLLM's extensions, as on the chat endpoint
                    "seed", "min_p", "repetition_penalty", "chat_template_kwargs"});
  for (const char* key : {"container", "mcp_servers", "context_management"}) {
    if (f.find(key)) not_supported(key, fmt::format("'{}'", key));
  }
  ojson chat = ojson::object();
  for (const char* key : {"model", "temperature", "top_p", "top_k", "seed", "min_p",
                          "repetition_penalty", "chat_template_kwargs"}) {
    if (const ojson* v = f.find(key)) chat[key] = *v;
  }
  const std::optional<int> max_tokens = f.int32("max_tokens");
  if (!max_tokens) throw_bad_request("max_tokens", "'max_tokens' is required");
  if (*max_tokens < 1) throw_bad_request("max_tokens", "'max_tokens' must be >= 1, got {}", *max_tokens);
  chat["max_tokens"] = *max_tokens;
  if (auto stream = f.boolean("stream")) chat["stream"] = *stream;
  ojson messages = ojson::array();
  if (const ojson* system = f.find("system")) {
    messages.push_back({{"role", "system"}, {"content", block_text(*system, "'system'", "system")}});
  }
  const ojson* list = f.find("messages");
  if (!list) throw_bad_request("messages", "'messages' is required");
  for (ojson& m : chat_messages(*list)) messages.push_back(std::move(m));
  chat["messages"] = std::move(messages);
  if (const ojson* stop = f.find("stop_sequences")) {
    if (!stop->is_array()) {
      throw_bad_request("stop_sequences", "'stop_sequences' must be a list of strings, got {}",
                        json_type_name(*stop));
    }
    if (!stop->empty()) chat["stop"] = *stop;
  }
  if (const ojson* tools = f.find("tools")) chat["tools"] = chat_tools(*tools);
  if (const ojson* choice = f.find("tool_choice")) set_tool_choice(*choice, chat);
  if (const ojson* thinking = f.find("thinking")) set_thinking(*thinking, chat);
  if (const ojson* metadata = f.find("metadata")) {
    const FieldReader m(*metadata, "'metadata'", "metadata.");
    m.reject_unknown({"user_id"});
    (void)m.string("user_id");
  }
  (void)f.string("service_tier");  // one tier here
  return chat;
}

MessagesRequest parse_messages_request(const ojson& body, const ServingContext& ctx) {
  const ojson chat = messages_to_chat_body(body);
  MessagesRequest out;
  try {
    out.generate = parse_chat_request(chat, ctx);
  } catch (const ApiError& e) {
    throw renamed(e);
  }
  out.stream = chat.value("stream", false);
  if (chat.contains("stop")) {
    for (const ojson& s : chat["stop"]) out.stop_sequences.push_back(s.get<std::string>());
  }
  return out;
}

}  // namespace kestrel::server
