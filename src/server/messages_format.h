// Anthropic's Messages API objects: the message ("type": "message") and its content blocks
// (thinking, text, tool_use), and the server-sent events that stream it (message_start ...
// message_stop), in the shapes of Anthropic's API reference.
//
// One MessageBuilder per message is told what the model wrote, piece by piece, in order:
// thinking, answer text, complete tool calls, then the end. Each call returns the stream
// events it makes and updates the message, so a non-streamed message (the events dropped)
// equals the one the stream's events build. A block opens as its first piece comes and
// closes when a piece of another kind comes or the message ends:
//   thinking:  content_block_start, content_block_delta (thinking_delta)..., content_block_stop
//   text:      content_block_start, content_block_delta (text_delta)..., content_block_stop
//   tool_use:  content_block_start, content_block_delta (input_json_delta: the whole input),
//              content_block_stop
// Thread safety: none; one handler thread uses a builder.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "server/tool_calls.h"

namespace kestrel::server {

struct MessageUsage {
  int input_tokens = 0;   // all of the prompt's tokens
  int cached_tokens = 0;  // of input_tokens: served from the prefix cache
  int output_tokens = 0;
};

class MessageBuilder {
 public:
  using Events = std::vector<nlohmann::ordered_json>;
  // Makes a new unique id with the given prefix ("toolu_").
  using NewId = std::function<std::string(const char* prefix)>;

  MessageBuilder(std::string id, std::string model, NewId new_id);

  // message_start: the message with no content yet, its prompt's tokens as input_tokens.
  Events start(int input_tokens);
  Events add_thinking(std::string_view text) { return add_piece(Open::kThinking, text); }
  Events add_text(std::string_view text) { return add_piece(Open::kText, text); }
  Events add_tool_use(const ToolCall& call);
  // The end: stop_reason from the engine's finish_reason ("length": max_tokens), any tool
  // call (tool_use), the stop string that matched (`matched`, a string among
  // `stop_sequences`: stop_sequence) or else end_turn. message_delta, message_stop.
  Events finish(const std::string& finish_reason, const nlohmann::json& matched,
                const std::vector<std::string>& stop_sequences, const MessageUsage& usage);

  // The message as it stands (whole after finish).
  const nlohmann::ordered_json& message() const { return message_; }

 private:
  enum class Open { kNone, kThinking, kText };
  Events add_piece(Open kind, std::string_view text);
  void close(Events& out);
  int open_index() const { return static_cast<int>(message_["content"].size()) - 1; }

  nlohmann::ordered_json message_;
  NewId new_id_;
  Open open_ = Open::kNone;
  bool tool_use_ = false;
};

// Anthropic's usage object: input_tokens not read from the cache, the cache's reads,
// output_tokens.
nlohmann::ordered_json message_usage(const MessageUsage& usage);

// One event as SSE: "event: <type>\ndata: <json>\n\n".
std::string messages_sse_event(const nlohmann::ordered_json& event);

// Anthropic's error body {"type": "error", "error": {"type", "message"}}, its type from the
// HTTP status (invalid_request_error, authentication_error, not_found_error, ...).
nlohmann::ordered_json anthropic_error_body(int status, const std::string& message);

}  // namespace kestrel::server
