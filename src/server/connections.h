// Closing the server's open connections at shutdown.
//
// cpp-httplib 0.11 gives no handle on accepted connections, and a worker waiting on an idle
// keep-alive connection only notices the shutdown after keep_alive_timeout. So shutdown
// finds the connections itself: the process's TCP sockets whose local port is the server's
// and that are not listening (the clients of an in-process server have other local ports).
#pragma once

namespace kestrel::server {

// shutdown(SHUT_RDWR) on every accepted TCP connection of this process to local `port`.
// The descriptors stay open (httplib closes them), so none can be reused under it.
// Returns how many were shut down. Linux (/proc/self/fd); elsewhere does nothing.
int close_connections_on_port(int port);

}  // namespace kestrel::server
