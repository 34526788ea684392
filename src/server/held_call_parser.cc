#include "server/held_call_parser.h"

#include <algorithm>

namespace kestrel::server {

ToolCallPiece HeldCallParser::feed(std::string_view text) {
  ToolCallPiece out;
  if (state_ == State::kContent) {
    out.content = std::string(text);
    return out;
  }
  held_.append(text);
  if (state_ == State::kUndecided) {
    const size_t first = held_.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) return out;  // only blanks so far
    const std::string_view start = std::string_view(held_).substr(first);
    const size_t n = std::min(start.size(), tag_.size());
    if (start[0] == open_ || start.substr(0, n) == tag_.substr(0, n)) {
      if (start[0] == open_ || start.size() >= tag_.size()) state_ = State::kCall;
      return out;  // calls, or maybe: held to the end
    }
    state_ = State::kContent;
    out.content = std::move(held_);
    held_.clear();
  }
  return out;
}

ToolCallPiece HeldCallParser::finish() {
  ToolCallPiece out;
  std::string_view text = held_;
  const size_t first = text.find_first_not_of(" \t\r\n");
  text.remove_prefix(first == std::string_view::npos ? text.size() : first);
  if (text.substr(0, tag_.size()) == tag_) text.remove_prefix(tag_.size());
  std::optional<std::vector<ToolCall>> calls;
  if (state_ != State::kContent) calls = parse(text);
  if (calls && !calls->empty()) {
    out.calls = std::move(*calls);
  } else {
    out.content = std::move(held_);
  }
  held_.clear();
  state_ = State::kUndecided;
  return out;
}

}  // namespace kestrel::server
