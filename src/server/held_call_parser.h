// The tool-call parsers whose calls are the whole answer (llama3_json: JSON objects;
// pythonic: a Python list), told apart from plain text by how the answer starts: `open` (its
// first character after blanks) or `tag` (a special token's text that decoding may keep).
// Such an answer is held back to its end and parsed whole; if it is not calls, all of it is
// content. An answer starting with anything else is content, streamed as it comes.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/tool_calls.h"

namespace kestrel::server {

class HeldCallParser : public ToolCallParser {
 public:
  HeldCallParser(char open, std::string_view tag) : open_(open), tag_(tag) {}
  ToolCallPiece feed(std::string_view text) final;
  ToolCallPiece finish() final;

 protected:
  // The calls `text` (the held answer, blanks and the tag taken off its start) is, or
  // nullopt where it is not calls.
  virtual std::optional<std::vector<ToolCall>> parse(std::string_view text) const = 0;

 private:
  enum class State { kUndecided, kCall, kContent };
  const char open_;
  const std::string_view tag_;
  State state_ = State::kUndecided;
  std::string held_;
};

}  // namespace kestrel::server
