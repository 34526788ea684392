#include "server/connections.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace kestrel::server {

int close_connections_on_port(int port) {
#ifdef __linux__
  int closed = 0;
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
    sockaddr_storage addr{};
    socklen_t addr_len = sizeof(addr);
    if (getsockname(int(fd), reinterpret_cast<sockaddr*>(&addr), &addr_len) != 0) continue;
    int local_port = -1;
    if (addr.ss_family == AF_INET)
      local_port = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6)
      local_port = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    if (local_port != port) continue;
    if (::shutdown(int(fd), SHUT_RDWR) == 0) ++closed;
  }
  return closed;
#else
  (void)port;
  return 0;
#endif
}

}  // namespace kestrel::server
