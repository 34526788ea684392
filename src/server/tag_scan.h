// Shared by the parsers that cut markup out of streamed text (reasoning.h, tool_calls.h).
#pragma once

#include <algorithm>
#include <string_view>

namespace kestrel::server {

// Length of the longest end of `text` that could be the start of `tag` (a proper prefix of
// it): text that must be held back until the next piece says whether the tag follows.
inline size_t partial_tag(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace kestrel::server
