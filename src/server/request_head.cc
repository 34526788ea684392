#include "server/request_head.h"

namespace kestrel::server {

HeadState HeadScanner::scan(std::string& bytes) {
  if (scanned_ == 0) {
    size_t empty = 0;
    while (empty < bytes.size() && (bytes[empty] == '\n' ||
                                    (bytes[empty] == '\r' && empty + 1 < bytes.size() &&
                                     bytes[empty + 1] == '\n'))) {
      empty += bytes[empty] == '\n' ? 1 : 2;
    }
    bytes.erase(0, empty);
  }
  for (;;) {
    const bool request_line = scanned_ == 0;
    const size_t limit = request_line ? kMaxRequestLineBytes : kMaxHeaderLineBytes;
    const size_t newline = bytes.find('\n', scanned_);
    const size_t line_end = newline == std::string::npos ? bytes.size() : newline + 1;
    if (line_end - scanned_ > limit) {
      return request_line ? HeadState::kUriTooLong : HeadState::kHeadersTooLarge;
    }
    if (newline == std::string::npos) {
      return bytes.size() > kMaxHeadBytes ? HeadState::kHeadersTooLarge : HeadState::kPartial;
    }
    const bool empty_line = !request_line && line_end - scanned_ == 2 && bytes[scanned_] == '\r';
    scanned_ = line_end;
    if (scanned_ > kMaxHeadBytes) return HeadState::kHeadersTooLarge;
    if (empty_line) return HeadState::kComplete;
  }
}

}  // namespace kestrel::server
