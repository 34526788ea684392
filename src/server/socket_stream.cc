#include "server/socket_stream.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace kestrel::server {
namespace {

// poll() for `events` on fd, retrying on EINTR; true when ready within `timeout`.
bool wait_for(int fd, short events, std::chrono::milliseconds timeout) {
  pollfd p{fd, events, 0};
  int n;
  do {
    n = ::poll(&p, 1, static_cast<int>(timeout.count()));
  } while (n < 0 && errno == EINTR);
  return n > 0;
}

void ip_and_port(const sockaddr_storage& addr, socklen_t len, std::string& ip, int& port) {
  if (addr.ss_family == AF_INET) {
    port = ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
  } else if (addr.ss_family == AF_INET6) {
    port = ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port);
  } else {
    return;
  }
  char host[NI_MAXHOST];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof(host), nullptr,
                    0, NI_NUMERICHOST) == 0) {
    ip = host;
  }
}

}  // namespace

SocketStream::SocketStream(int fd, std::string buffered, std::chrono::milliseconds read_timeout,
                           std::chrono::milliseconds write_timeout)
    : fd_(fd),
      buffered_(std::move(buffered)),
      read_timeout_(read_timeout),
      write_timeout_(write_timeout) {}

bool SocketStream::is_readable() const {
  return offset_ < buffered_.size() || wait_for(fd_, POLLIN, read_timeout_);
}

bool SocketStream::is_writable() const { return wait_for(fd_, POLLOUT, write_timeout_); }

ssize_t SocketStream::read(char* ptr, size_t size) {
  if (offset_ < buffered_.size()) {
    const size_t n = std::min(size, buffered_.size() - offset_);
    std::memcpy(ptr, buffered_.data() + offset_, n);
    offset_ += n;
    return static_cast<ssize_t>(n);
  }
  if (!wait_for(fd_, POLLIN, read_timeout_)) return -1;
  ssize_t n;
  do {
    n = ::recv(fd_, ptr, size, 0);
  } while (n < 0 && errno == EINTR);
  return n;
}

ssize_t SocketStream::write(const char* ptr, size_t size) {
  if (!is_writable()) return -1;
  ssize_t n;
  do {
    n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n;
}

void SocketStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    ip_and_port(addr, len, ip, port);
}

void SocketStream::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    ip_and_port(addr, len, ip, port);
}

std::string SocketStream::take_buffered() {
  std::string rest = buffered_.substr(offset_);
  buffered_.clear();
  offset_ = 0;
  return rest;
}

void SocketStream::set_buffered(std::string bytes) {
  buffered_ = std::move(bytes);
  offset_ = 0;
}

}  // namespace kestrel::server
