// Finding the server's accepted connections: to close them at shutdown, and to see whether
// the client of a request that is still generating has gone.
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

// The descriptor of this process's accepted connection from local `local_port` to a client's
// `remote_port` (a request's own, from httplib::Request), or -1 (not found; not Linux). It
// stays valid while the request's handler runs, since httplib closes it only afterwards.
int find_connection(int local_port, int remote_port);
// False once the client has closed its end of connection `fd` (or it failed); never blocks.
bool peer_open(int fd);

}  // namespace kestrel::server
