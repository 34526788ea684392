// Serving connections so that slow or idle clients hold no worker thread.
//
// httplib 0.11 gives each accepted connection a worker of its pool until the connection
// closes, and waits for a request head with no bound on its total time (only 5 s between
// bytes). So http_threads clients that send their heads a byte at a time, or sit on idle
// keep-alive connections, stalled every other client (slowloris).
//
// GatedServer hands each accepted connection to a ConnectionGate instead. One poller
// thread (epoll) reads the request heads of every connection; a connection gets a worker
// only once a whole head is in, for that request, and goes back to the poller after its
// response. So workers bound the requests served at once, not the connections open:
//   - a head must be complete within kHeadTimeout of the connection's start (or of its
//     first byte after an idle keep-alive wait): else 408 and the connection closes;
//   - an idle keep-alive connection closes after keep_alive_timeout;
//   - a request line over 8 KiB is a 414, a header line over 8 KiB or a head over 32 KiB a
//     431 (request_head.h), answered by the gate without reading further;
//   - past kConnectionsPerWorker x workers open connections, a new one gets a 503 at once
//     and is closed;
//   - a connection the server closes after a response (close_connection_after_response(),
//     which HttpServer calls for each response that says "Connection: close") is first shut
//     for writing and drained for up to kLingerTimeout, so that a client still sending (a
//     body the server refused) reads the answer instead of a reset.
// The gate's own answers (408, 414, 431, 503) have OpenAI's error body.
//
// A request's body is read by its worker, as before: a client that sends a body slowly
// holds a worker (httplib's 5 s between reads, like nginx's client_body_timeout).
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <memory>

namespace kestrel::server {

constexpr auto kHeadTimeout = std::chrono::seconds(10);
constexpr auto kLingerTimeout = std::chrono::seconds(5);
constexpr size_t kConnectionsPerWorker = 8;

// On a thread serving a request (a route handler, httplib's error handler or logger): the
// connection closes once this request's response is written.
void close_connection_after_response();

class ConnectionGate;

// An httplib::Server whose connections go through a ConnectionGate: routes, handlers and
// settings as usual. The keep-alive settings and the read and write timeouts are taken from
// httplib's setters when listening starts. Stopping (the end of the accept loop) waits for
// the requests being served, then closes the connections that are waiting.
class GatedServer : public httplib::Server {
 public:
  GatedServer();
  ~GatedServer() override;

  // Before listening: `workers` requests are served at once, and at most
  // kConnectionsPerWorker x workers connections are open (fewer where the process's
  // descriptor limit, RLIMIT_NOFILE, is lower). Default: 512.
  void set_workers(size_t workers);

 private:
  // httplib's accept loop hands each accepted socket here (through the gate's task queue).
  bool process_and_close_socket(socket_t sock) override;

  size_t workers_ = 512;
  std::unique_ptr<ConnectionGate> gate_;
};

}  // namespace kestrel::server
