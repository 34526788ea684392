// Finding the end of an HTTP/1.1 request head (request line and header lines, up to the
// empty line) in bytes as they arrive, and holding it to the sizes httplib accepts.
#pragma once

#include <cstddef>
#include <string>

namespace kestrel::server {

// httplib 0.11's limits (CPPHTTPLIB_REQUEST_URI_MAX_LENGTH and CPPHTTPLIB_HEADER_MAX_LENGTH,
// compiled into its library): a longer request line is its 414, a longer header line its 400.
constexpr size_t kMaxRequestLineBytes = 8192;  // with its line ending
constexpr size_t kMaxHeaderLineBytes = 8192;   // with its line ending
// The whole head, as nginx's default large_client_header_buffers (4 x 8 KiB).
constexpr size_t kMaxHeadBytes = 32768;

enum class HeadState {
  kPartial,          // no end yet, nothing over a limit
  kComplete,         // the head is bytes [0, head_bytes)
  kUriTooLong,       // the request line is over kMaxRequestLineBytes: 414
  kHeadersTooLarge,  // a header line or the whole head is over its limit: 431
};

// Scans `bytes` (a connection's input from the start of a request) from where the last
// call stopped. Lines end with "\n"; the head ends with a line that is "\r\n" alone (a bare
// "\n" does not end it, as in httplib, which skips such lines). Empty lines before the
// request line are dropped from `bytes` (RFC 9112 section 2.2: some clients send a CRLF
// after a body).
class HeadScanner {
 public:
  HeadState scan(std::string& bytes);
  // After kComplete: the head's length, its empty line included.
  size_t head_bytes() const { return scanned_; }
  // Starts over for a next request whose bytes begin at offset 0.
  void reset() { scanned_ = 0; }

 private:
  size_t scanned_ = 0;  // bytes [0, scanned_) are whole lines, none of them the last
};

}  // namespace kestrel::server
