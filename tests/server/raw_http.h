// Raw HTTP/1.1 over a socket, for requests an HTTP client library would not send as written
// (its own chunk framing, one Content-Length, a URI and headers of sane size).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace kestrel::server_test {

// A TCP connection to 127.0.0.1:port whose reads give up after `timeout_s`; -1 on failure.
inline int raw_connect(int port, int timeout_s = 10) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval timeout{timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline bool raw_send(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += size_t(n);
  }
  return true;
}

// Sends `request` as raw bytes to 127.0.0.1:port and returns everything the server answers
// until it closes the connection (or 10 s pass).
inline std::string raw_exchange(int port, const std::string& request) {
  const int fd = raw_connect(port);
  if (fd < 0) return "no connection";
  std::string answer;
  if (raw_send(fd, request)) {
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) answer.append(buf, size_t(n));
  }
  ::close(fd);
  return answer;
}

// The length of the first whole response in `answer`: its head and a body of its
// Content-Length (none without one); npos while it is incomplete.
inline size_t raw_response_length(const std::string& answer) {
  const size_t head_end = answer.find("\r\n\r\n");
  if (head_end == std::string::npos) return std::string::npos;
  size_t length = 0;
  for (const char* name : {"\r\nContent-Length: ", "\r\ncontent-length: "}) {
    if (const size_t at = answer.find(name); at != std::string::npos && at < head_end)
      length = std::strtoull(answer.c_str() + at + 18, nullptr, 10);
  }
  return answer.size() >= head_end + 4 + length ? head_end + 4 + length : std::string::npos;
}

// The first response in `answer` (all of it when incomplete).
inline std::string raw_first_response(const std::string& answer) {
  const size_t length = raw_response_length(answer);
  return length == std::string::npos ? answer : answer.substr(0, length);
}

// Reads one response from `fd` without waiting for the connection to close. "" when the
// connection closes first or the timeout of raw_connect passes.
inline std::string raw_read_response(int fd) {
  std::string answer;
  char buf[4096];
  for (;;) {
    if (const size_t length = raw_response_length(answer); length != std::string::npos)
      return answer.substr(0, length);
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return "";
    answer.append(buf, size_t(n));
  }
}

// One request, one response (raw_read_response) on a new connection.
inline std::string raw_response(int port, const std::string& request) {
  const int fd = raw_connect(port);
  if (fd < 0) return "no connection";
  const std::string answer = raw_send(fd, request) ? raw_read_response(fd) : "";
  ::close(fd);
  return answer;
}

// The status code of a raw response ("HTTP/1.1 400 Bad Request..."), or -1.
inline int raw_status(const std::string& answer) {
  if (answer.rfind("HTTP/1.", 0) != 0 || answer.size() < 12) return -1;
  return std::atoi(answer.c_str() + 9);
}

// The body of a raw response (after the head).
inline std::string raw_body(const std::string& answer) {
  const size_t head_end = answer.find("\r\n\r\n");
  return head_end == std::string::npos ? "" : answer.substr(head_end + 4);
}

}  // namespace kestrel::server_test
