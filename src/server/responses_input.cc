#include "server/responses_input.h"

#include <string>

#include "server/api_error.h"
#include "server/request_fields.h"

namespace kestrel::server {
namespace {

using ojson = nlohmann::ordered_json;

// A 400 naming "input": the item's place and what is wrong with it.
template <typename... Args>
[[noreturn]] void bad_item(const std::string& where, fmt::format_string<Args...> format,
                           Args&&... args) {
  throw_bad_request("input", "{}: {}", where, fmt::format(format, std::forward<Args>(args)...));
}

std::string required_string(const ojson& item, const char* key, const std::string& where) {
  const auto it = item.find(key);
  if (it == item.end() || !it->is_string()) bad_item(where, "'{}' must be a string", key);
  return it->get<std::string>();
}

// A message's content as chat content: a string, or a list of {"type": "text"} parts.
ojson message_content(const ojson& content, const std::string& where) {
  if (content.is_string()) return content;
  if (!content.is_array()) {
    bad_item(where, "'content' must be a string or a list of content parts, got {}",
             json_type_name(content));
  }
  ojson parts = ojson::array();
  for (size_t k = 0; k < content.size(); ++k) {
    const ojson& part = content[k];
    const std::string type = string_member(part, "type");
    const char* key = type == "refusal" ? "refusal" : "text";
    if (type != "input_text" && type != "output_text" && type != "text" && type != "refusal") {
      bad_item(where,
               "content part {} of type '{}' is not supported (only input_text, "
               "output_text and refusal)",
               k, type);
    }
    parts.push_back({{"type", "text"}, {"text", required_string(part, key, where)}});
  }
  return parts;
}

// function_call_output's output: a string, or a list of input_text parts (joined).
std::string call_output(const ojson& item, const std::string& where) {
  const auto it = item.find("output");
  if (it != item.end() && it->is_string()) return it->get<std::string>();
  if (it == item.end() || !it->is_array()) {
    bad_item(where, "'output' must be a string or a list of input_text parts");
  }
  std::string out;
  for (const ojson& part : *it) {
    if (!part.is_object() || string_member(part, "type") != "input_text") {
      bad_item(where, "'output' parts other than input_text are not supported");
    }
    if (!out.empty()) out += "\n";
    out += required_string(part, "text", where);
  }
  return out;
}

// A reasoning item's text: its reasoning_text content, else its summary.
std::string reasoning_text(const ojson& item, const std::string& where) {
  if (item.contains("encrypted_content") && !item["encrypted_content"].is_null()) {
    bad_item(where, "'encrypted_content' is not supported");
  }
  std::string text;
  for (const char* key : {"content", "summary"}) {
    const auto it = item.find(key);
    if (it == item.end() || it->is_null()) continue;
    if (!it->is_array()) bad_item(where, "'{}' must be a list", key);
    for (const ojson& part : *it) {
      if (!part.is_object()) bad_item(where, "'{}' parts must be objects", key);
      if (!text.empty()) text += "\n";
      text += required_string(part, "text", where);
    }
    if (!text.empty()) break;
  }
  return text;
}

// The assistant message a function_call or assistant text joins: the last message when it
// is an assistant's, else a new one.
ojson& assistant_turn(ojson& messages) {
  if (messages.empty() || string_member(messages.back(), "role") != "assistant") {
    messages.push_back({{"role", "assistant"}, {"content", ""}});
  }
  return messages.back();
}

void append_message(const ojson& item, const std::string& where, ojson& messages) {
  std::string role = required_string(item, "role", where);
  if (role != "user" && role != "system" && role != "developer" && role != "assistant") {
    bad_item(where, "'role' must be 'user', 'system', 'developer' or 'assistant', got '{}'", role);
  }
  const auto content = item.find("content");
  if (content == item.end()) bad_item(where, "'content' is required");
  ojson converted = message_content(*content, where);
  if (role != "assistant") {
    // "developer" stays: the chat path makes it "system" where the template does not render
    // it (check_roles), as for a chat request.
    messages.push_back({{"role", role}, {"content", converted}});
    return;
  }
  // Text after reasoning of the same turn joins it; text after calls starts a new turn.
  const bool joins = !messages.empty() && string_member(messages.back(), "role") == "assistant" &&
                     !messages.back().contains("tool_calls") && messages.back()["content"] == "";
  if (!joins) messages.push_back({{"role", "assistant"}});
  messages.back()["content"] = std::move(converted);
}

}  // namespace

void append_input_messages(const ojson& input, ojson& messages) {
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
    return;
  }
  if (!input.is_array()) {
    throw_bad_request("input", "'input' must be a string or a list of items, got {}",
                      json_type_name(input));
  }
  if (input.empty()) throw_bad_request("input", "'input' must not be empty");
  for (size_t i = 0; i < input.size(); ++i) {
    const ojson& item = input[i];
    const std::string where = fmt::format("input[{}]", i);
    if (!item.is_object()) bad_item(where, "must be an object, got {}", json_type_name(item));
    const auto type_it = item.find("type");
    if (type_it != item.end() && !type_it->is_string()) bad_item(where, "'type' must be a string");
    const std::string type = type_it == item.end() ? "message" : type_it->get<std::string>();
    if (type == "message") {
      append_message(item, where, messages);
    } else if (type == "function_call") {
      const ojson call = {{"id", required_string(item, "call_id", where)},
                          {"type", "function"},
                          {"function",
                           {{"name", required_string(item, "name", where)},
                            {"arguments", required_string(item, "arguments", where)}}}};
      ojson& turn = assistant_turn(messages);
      if (!turn.contains("tool_calls")) turn["tool_calls"] = ojson::array();
      turn["tool_calls"].push_back(call);
    } else if (type == "function_call_output") {
      messages.push_back({{"role", "tool"},
                          {"tool_call_id", required_string(item, "call_id", where)},
                          {"content", call_output(item, where)}});
    } else if (type == "reasoning") {
      messages.push_back({{"role", "assistant"},
                          {"content", ""},
                          {"reasoning_content", reasoning_text(item, where)}});
    } else if (type == "item_reference") {
      bad_item(where, "item references are resolved against stored responses; none is stored");
    } else {
      bad_item(where, "items of type '{}' are not supported", type);
    }
  }
}

}  // namespace kestrel::server
