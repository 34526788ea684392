// A chunked request body read strictly (RFC 9112 section 7.1) before httplib sees the request,
// which then gets the same request with a Content-Length.
//
// Why: httplib 0.11's chunk reader is lax. A chunk whose data is not followed by CRLF ends the
// body there, and the bytes after it are read as a next request; a chunk-size line of any
// length is held in memory. A proxy in front that reads the chunks strictly then disagrees
// with this server about where the request ends (request smuggling). Here a body is accepted
// only as the RFC frames it:
//   chunk      = 1*16 HEXDIG [ chunk-ext ] CRLF chunk-data CRLF   (the size line <= 4 KiB)
//   last-chunk = 1*("0") [ chunk-ext ] CRLF
//   then trailer lines (each <= 8 KiB, 32 KiB in all, dropped) up to an empty CRLF line.
// Anything else is a 400; a body over the server's limit a 413, found as its chunks arrive.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace kestrel::server {

// Up to `size` bytes into `ptr`: > 0 read, 0 the peer closed, < 0 an error or a timeout
// (httplib::Stream::read's contract).
using ReadBytes = std::function<ssize_t(char* ptr, size_t size)>;

struct ChunkedBody {
  int status = 0;       // 0: read; else 400 or 413, with `error` saying why
  std::string error;
  std::string body;     // the chunks' data, joined
  std::string rest;     // bytes read after the body (a pipelined next request)
};

// Reads one chunked body from `read` (the bytes after the request head).
ChunkedBody read_chunked_body(const ReadBytes& read, size_t max_body_bytes);

// The request head (request line and header lines, its final empty line included) says
// "Transfer-Encoding: chunked" as its one framing header on an HTTP/1.1 request: the only
// case read_chunked_body takes. Other framings, ambiguous ones included, are httplib's (and
// request_framing.h refuses the ambiguous ones).
bool is_plainly_chunked(std::string_view head);

// `head` with its Transfer-Encoding and Expect lines replaced by "Content-Length: <n>".
std::string with_content_length(std::string_view head, size_t n);

// Whether the head asks for "100 Continue" before its body (Expect: 100-continue).
bool expects_continue(std::string_view head);

}  // namespace kestrel::server
