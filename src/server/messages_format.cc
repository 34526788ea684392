#include "server/messages_format.h"

#include <algorithm>
#include <utility>

namespace kestrel::server {

using ojson = nlohmann::ordered_json;
using Events = MessageBuilder::Events;

MessageBuilder::MessageBuilder(std::string id, std::string model, NewId new_id)
    : new_id_(std::move(new_id)) {
  message_ = {{"id", std::move(id)},
              {"type", "message"},
              {"role", "assistant"},
              {"model", std::move(model)},
              {"content", ojson::array()},
              {"stop_reason", nullptr},
              {"stop_sequence", nullptr},
              {"usage", message_usage({})}};
}

Events MessageBuilder::start(int input_tokens) {
  MessageUsage usage;
  usage.input_tokens = input_tokens;
  message_["usage"] = message_usage(usage);
  return {{{"type", "message_start"}, {"message", message_}}};
}

Events MessageBuilder::add_piece(Open kind, std::string_view text) {
  Events out;
  if (text.empty()) return out;
  const bool thinking = kind == Open::kThinking;
  const char* field = thinking ? "thinking" : "text";
  if (open_ != kind) {
    close(out);
    ojson block = thinking ? ojson{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                           : ojson{{"type", "text"}, {"text", ""}};
    message_["content"].push_back(block);
    out.push_back({{"type", "content_block_start"}, {"index", open_index()}, {"content_block", block}});
    open_ = kind;
  }
  ojson& block = message_["content"][open_index()];
  block[field] = block[field].get<std::string>() + std::string(text);
  out.push_back({{"type", "content_block_delta"},
                 {"index", open_index()},
                 {"delta", {{"type", thinking ? "thinking_delta" : "text_delta"}, {field, std::string(text)}}}});
  return out;
}

Events MessageBuilder::add_tool_use(const ToolCall& call) {
  Events out;
  close(out);
  // The parsers give a JSON object's text; anything else would be no input at all.
  ojson input = ojson::parse(call.arguments, nullptr, false);
  if (!input.is_object()) input = ojson::object();
  ojson block = {{"type", "tool_use"}, {"id", new_id_("toolu_")}, {"name", call.name}, {"input", ojson::object()}};
  message_["content"].push_back(block);
  const int index = open_index();
  out.push_back({{"type", "content_block_start"}, {"index", index}, {"content_block", block}});
  out.push_back({{"type", "content_block_delta"},
                 {"index", index},
                 {"delta", {{"type", "input_json_delta"}, {"partial_json", input.dump()}}}});
  out.push_back({{"type", "content_block_stop"}, {"index", index}});
  message_["content"][index]["input"] = std::move(input);
  tool_use_ = true;
  return out;
}

void MessageBuilder::close(Events& out) {
  if (open_ == Open::kNone) return;
  out.push_back({{"type", "content_block_stop"}, {"index", open_index()}});
  open_ = Open::kNone;
}

Events MessageBuilder::finish(const std::string& finish_reason, const nlohmann::json& matched,
                              const std::vector<std::string>& stop_sequences,
                              const MessageUsage& usage) {
  Events out;
  close(out);
  ojson stop_sequence = nullptr;
  std::string reason = "end_turn";
  if (finish_reason == "length") {
    reason = "max_tokens";
  } else if (tool_use_) {
    reason = "tool_use";
  } else if (matched.is_string() &&
             std::find(stop_sequences.begin(), stop_sequences.end(),
                       matched.get<std::string>()) != stop_sequences.end()) {
    reason = "stop_sequence";
    stop_sequence = matched.get<std::string>();
  }
  message_["stop_reason"] = reason;
  message_["stop_sequence"] = stop_sequence;
  message_["usage"] = message_usage(usage);
  out.push_back({{"type", "message_delta"},
                 {"delta", {{"stop_reason", reason}, {"stop_sequence", stop_sequence}}},
                 {"usage", message_["usage"]}});
  out.push_back({{"type", "message_stop"}});
  return out;
}

ojson message_usage(const MessageUsage& usage) {
  return {{"input_tokens", usage.input_tokens - usage.cached_tokens},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", usage.cached_tokens},
          {"output_tokens", usage.output_tokens}};
}

std::string messages_sse_event(const ojson& event) {
  return "event: " + event.at("type").get<std::string>() + "\ndata: " +
         event.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n\n";
}

ojson anthropic_error_body(int status, const std::string& message) {
  const char* type = "api_error";
  switch (status) {
    case 400: case 405: case 411: case 415: case 416: case 422: type = "invalid_request_error"; break;
    case 401: type = "authentication_error"; break;
    case 403: type = "permission_error"; break;
    case 404: type = "not_found_error"; break;
    case 413: type = "request_too_large"; break;
    case 429: type = "rate_limit_error"; break;
    case 503: case 529: type = "overloaded_error"; break;
    default: break;
  }
  return {{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
}

}  // namespace kestrel::server
