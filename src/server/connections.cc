#include "server/connections.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace kestrel::server {

namespace {

int port_of(const sockaddr_storage& addr) {
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  return -1;
}

// Calls fn(fd, local_port, remote_port) for each accepted (not listening) TCP socket of this
// process; stops when fn returns false.
template <typename Fn>
void for_each_connection(Fn&& fn) {
#ifdef __linux__
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    char* end = nullptr;
    const std::string name = entry.path().filename().string();
    const long fd = std::strtol(name.c_str(), &end, 10);
    if (end == name.c_str() || *end != '\0') continue;
    struct stat st {};
    if (fstat(int(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    int listening = 0;
    socklen_t len = sizeof(listening);
    if (getsockopt(int(fd), SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || listening)
      continue;
    sockaddr_storage local{}, remote{};
    socklen_t local_len = sizeof(local), remote_len = sizeof(remote);
    if (getsockname(int(fd), reinterpret_cast<sockaddr*>(&local), &local_len) != 0) continue;
    const int remote_port = getpeername(int(fd), reinterpret_cast<sockaddr*>(&remote),
                                        &remote_len) == 0 ? port_of(remote) : -1;
    if (!fn(int(fd), port_of(local), remote_port)) return;
  }
#else
  (void)fn;
#endif
}

}  // namespace

int close_connections_on_port(int port) {
  int closed = 0;
  for_each_connection([&](int fd, int local_port, int) {
    if (local_port == port && ::shutdown(fd, SHUT_RDWR) == 0) ++closed;
    return true;
  });
  return closed;
}

int find_connection(int local_port, int remote_port) {
  int found = -1;
  for_each_connection([&](int fd, int local, int remote) {
    if (local == local_port && remote == remote_port) found = fd;
    return found < 0;
  });
  return found;
}

bool peer_open(int fd) {
  char byte;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return true;  // the client sent more (a pipelined request): still there
  if (n == 0) return false;  // its end is closed
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

}  // namespace kestrel::server
