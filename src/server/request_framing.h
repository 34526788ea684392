// How a request's body is framed (RFC 9112 section 6), checked before it is read.
//
// httplib 0.11 reads a body by the first Content-Length header, or as chunks when
// Transfer-Encoding is "chunked" whatever Content-Length says, and until the client closes
// for any other coding. A proxy in front may read the same bytes another way, and the bytes
// it takes for a next request are then this server's body, or the other way round (request
// smuggling); so a request whose framing could be read two ways is refused, and its
// connection closed.
#pragma once

#include <httplib.h>

#include <optional>

#include "server/api_error.h"

namespace kestrel::server {

// The error for a request whose body framing is ambiguous or unreadable, else nullopt:
//   400: whitespace in a header name; Content-Length and Transfer-Encoding together; more than one Content-Length or
//        Transfer-Encoding header; a Content-Length that is not a decimal number;
//        Transfer-Encoding in an HTTP/1.0 request;
//   501: a Transfer-Encoding other than "chunked" (RFC 9112 section 6.1).
// The server must close the connection after answering it.
std::optional<ApiError> framing_error(const httplib::Request& req);

// True when the request declares a body that httplib will not read (its method takes none:
// GET, HEAD, OPTIONS, ...): the connection must close after the answer, or the body would be
// read as a next request.
bool body_left_unread(const httplib::Request& req);

// True when the request declares a body. httplib reads even a POST's body only once routing
// passes the request on, so a request the pre-routing hook answers (a 401) leaves its body
// unread: the connection must close after the answer.
bool declares_body(const httplib::Request& req);

}  // namespace kestrel::server
