#include "server/connection_gate.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "core/error.h"
#include "server/api_error.h"
#include "server/chunked_body.h"
#include "server/request_head.h"
#include "server/socket_stream.h"

namespace kestrel::server {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kSweepInterval = std::chrono::milliseconds(100);
constexpr size_t kReadChunk = 16384;
constexpr size_t kReservedDescriptors = 256;  // model files, the engine, logs

thread_local bool t_close_after_response = false;

const char* reason_phrase(int status) {
  switch (status) {
    case 408:
      return "Request Timeout";
    case 414:
      return "URI Too Long";
    case 431:
      return "Request Header Fields Too Large";
    case 400:
      return "Bad Request";
    case 413:
      return "Content Too Large";
    default:
      return "Service Unavailable";
  }
}

// Writes a small error response without waiting: a fresh socket buffer takes it whole, and a
// client that cannot take it loses nothing it asked for in time.
void send_error_now(int fd, int status, const std::string& message) {
  const std::string body =
      error_body(message, status >= 500 ? "server_error" : "invalid_request_error").dump();
  const std::string response = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
      "Connection: close\r\n\r\n{}",
      status, reason_phrase(status), body.size(), body);
  (void)::send(fd, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace

void close_connection_after_response() { t_close_after_response = true; }

struct GateLimits {
  size_t workers = 512;  // requests served at once
  size_t max_connections = 4096;
  std::chrono::milliseconds keep_alive_timeout{5000};
  size_t keep_alive_max_count = 1000;  // requests per connection
  std::chrono::milliseconds read_timeout{5000};   // between reads of a body
  std::chrono::milliseconds write_timeout{5000};  // for room to write
  size_t max_body_bytes = 16 << 20;               // a chunked body's limit (as httplib's)
};

class ConnectionGate {
 public:
  // Runs one request from the stream (httplib's process_request); false when the connection
  // is dead (a write failed). `last`: the connection closes after it.
  using ProcessRequest = std::function<bool(httplib::Stream&, bool last, bool& client_closes)>;

  ConnectionGate(GateLimits limits, ProcessRequest process);
  ~ConnectionGate() { stop(); }

  void admit(int fd);  // a newly accepted connection; the gate owns fd from here
  void stop();

 private:
  struct Conn {
    int fd = -1;
    std::string bytes;  // read from the socket, not yet handed to httplib
    HeadScanner head;
    Clock::time_point deadline;
    size_t served = 0;       // requests answered on it
    bool idle = false;       // waiting for a next request after a response
    bool lingering = false;  // answered and shut for writing; what comes is dropped
  };
  using ConnPtr = std::shared_ptr<Conn>;

  void poll_loop();
  void on_readable(int fd);
  void sweep(Clock::time_point now);
  void serve(const ConnPtr& c);
  // A chunked body read strictly (chunked_body.h) and handed on with a Content-Length; false
  // when it was refused (answered here; the connection closes).
  bool dechunk(Conn& c, SocketStream& stream);
  void park(const ConnPtr& c);
  void dispatch(const ConnPtr& c);
  void refuse(Conn& c, HeadState state);
  void begin_linger(Conn& c);
  void close_parked(int fd);
  void close_fd(int fd);

  const GateLimits limits_;
  const ProcessRequest process_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::mutex mu_;
  std::condition_variable idle_;
  std::unordered_map<int, ConnPtr> parked_;  // guarded by mu_; only the poller erases
  size_t active_ = 0;          // guarded by mu_: connections handed to a worker
  bool poller_done_ = false;   // guarded by mu_
  bool stopped_ = false;       // guarded by mu_
  std::atomic<bool> stopping_{false};
  std::atomic<size_t> open_{0};
  std::unique_ptr<httplib::ThreadPool> pool_;
  std::thread poller_;
};

ConnectionGate::ConnectionGate(GateLimits limits, ProcessRequest process)
    : limits_(limits), process_(std::move(process)) {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  KS_CHECK(epoll_fd_ >= 0 && wake_fd_ >= 0, "ConnectionGate: epoll/eventfd failed (errno {})",
           errno);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  pool_ = std::make_unique<httplib::ThreadPool>(limits_.workers);
  poller_ = std::thread([this] { poll_loop(); });
}

void ConnectionGate::admit(int fd) {
  if (open_ >= limits_.max_connections) {
    send_error_now(fd, 503,
                   fmt::format("The server has {} connections open, its limit; try again later.",
                               limits_.max_connections));
    ::close(fd);
    return;
  }
  ++open_;
  // httplib writes a response's head and body in two writes. With Nagle's algorithm the body
  // waited for the head's ACK, which a client delays by up to 40 ms: every answer on a
  // kept-alive connection took 40 ms more.
  int yes = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
  auto c = std::make_shared<Conn>();
  c->fd = fd;
  c->deadline = Clock::now() + kHeadTimeout;
  park(c);
}

void ConnectionGate::stop() {
  {
    std::unique_lock lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    // The requests being served finish first (HttpServer::shutdown bounds them and closes
    // the connections); meanwhile waiting connections still get answers (503s, while
    // draining).
    idle_.wait(lock, [this] { return active_ == 0; });
    stopping_ = true;
  }
  const uint64_t one = 1;
  (void)::write(wake_fd_, &one, sizeof(one));
  if (poller_.joinable()) poller_.join();
  pool_->shutdown();
  ::close(epoll_fd_);
  ::close(wake_fd_);
}

void ConnectionGate::poll_loop() {
  std::array<epoll_event, 256> events;
  auto next_sweep = Clock::now() + kSweepInterval;
  while (!stopping_) {
    const int n = ::epoll_wait(epoll_fd_, events.data(), int(events.size()),
                               int(kSweepInterval.count()));
    for (int i = 0; i < n; ++i) {
      if (events[i].data.fd == wake_fd_) continue;  // stopping_ says why
      on_readable(events[i].data.fd);
    }
    const auto now = Clock::now();
    if (now >= next_sweep) {
      sweep(now);
      next_sweep = now + kSweepInterval;
    }
  }
  std::lock_guard lock(mu_);
  poller_done_ = true;
  for (const auto& [fd, c] : parked_) close_fd(fd);
  parked_.clear();
}

void ConnectionGate::on_readable(int fd) {
  ConnPtr c;
  {
    std::lock_guard lock(mu_);
    auto it = parked_.find(fd);
    if (it == parked_.end()) return;  // an event of a connection closed since
    c = it->second;
  }
  char chunk[kReadChunk];
  const ssize_t n = ::recv(fd, chunk, sizeof(chunk), MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n <= 0) {  // the client closed, or the connection failed
    close_parked(fd);
    return;
  }
  if (c->lingering) return;
  // A keep-alive connection's next request has begun: its head has kHeadTimeout from now.
  if (c->idle) c->deadline = Clock::now() + kHeadTimeout;
  c->idle = false;
  c->bytes.append(chunk, size_t(n));
  const HeadState state = c->head.scan(c->bytes);
  if (state == HeadState::kComplete) {
    dispatch(c);
  } else if (state != HeadState::kPartial) {
    refuse(*c, state);
  }
}

void ConnectionGate::sweep(Clock::time_point now) {
  std::vector<ConnPtr> due;
  {
    std::lock_guard lock(mu_);
    for (const auto& [fd, c] : parked_) {
      if (now >= c->deadline) due.push_back(c);
    }
  }
  for (const ConnPtr& c : due) {
    if (c->lingering || c->bytes.empty()) {
      close_parked(c->fd);  // idle, or drained long enough
    } else {
      send_error_now(c->fd, 408,
                     fmt::format("The request head did not arrive within {} s.",
                                 std::chrono::seconds(kHeadTimeout).count()));
      begin_linger(*c);
    }
  }
}

void ConnectionGate::dispatch(const ConnPtr& c) {
  {
    std::lock_guard lock(mu_);
    parked_.erase(c->fd);
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
    ++active_;
  }
  pool_->enqueue([this, c] { serve(c); });
}

void ConnectionGate::serve(const ConnPtr& c) {
  SocketStream stream(c->fd, std::move(c->bytes), limits_.read_timeout, limits_.write_timeout);
  for (;;) {
    if (!dechunk(*c, stream)) {
      begin_linger(*c);
      park(c);
      break;
    }
    ++c->served;
    const bool last = c->served >= limits_.keep_alive_max_count;
    bool client_closes = false;
    t_close_after_response = false;
    if (!process_(stream, last, client_closes)) {
      close_fd(c->fd);
      break;
    }
    if (last || client_closes || t_close_after_response || stopping_) {
      begin_linger(*c);
      park(c);
      break;
    }
    c->bytes = stream.take_buffered();  // a pipelined request's bytes, if any
    c->head.reset();
    const HeadState state = c->head.scan(c->bytes);
    if (state == HeadState::kComplete) {
      stream.set_buffered(std::move(c->bytes));
      continue;
    }
    if (state != HeadState::kPartial) {
      refuse(*c, state);
    } else {
      c->idle = c->bytes.empty();
      c->deadline = Clock::now() + (c->idle ? limits_.keep_alive_timeout
                                            : std::chrono::milliseconds(kHeadTimeout));
    }
    park(c);
    break;
  }
  std::lock_guard lock(mu_);
  --active_;
  idle_.notify_all();
}

bool ConnectionGate::dechunk(Conn& c, SocketStream& stream) {
  // Every request passes here: look at its head in place, and move bytes only for a chunked one.
  const size_t head_bytes = c.head.head_bytes();
  if (!is_plainly_chunked(stream.buffered().substr(0, head_bytes))) return true;
  const std::string bytes = stream.take_buffered();
  const std::string request_head = bytes.substr(0, head_bytes);
  stream.set_buffered(bytes.substr(head_bytes));
  if (expects_continue(request_head)) {
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    if (stream.write(kContinue.data(), kContinue.size()) != ssize_t(kContinue.size())) return false;
  }
  ChunkedBody body = read_chunked_body(
      [&stream](char* ptr, size_t size) { return stream.read(ptr, size); },
      limits_.max_body_bytes);
  if (body.status != 0) {
    send_error_now(c.fd, body.status, body.error);
    return false;
  }
  stream.set_buffered(with_content_length(request_head, body.body.size()) + body.body + body.rest);
  return true;
}

void ConnectionGate::park(const ConnPtr& c) {
  std::lock_guard lock(mu_);
  if (poller_done_) {
    close_fd(c->fd);
    return;
  }
  parked_[c->fd] = c;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = c->fd;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c->fd, &ev);
}

void ConnectionGate::refuse(Conn& c, HeadState state) {
  if (state == HeadState::kUriTooLong) {
    send_error_now(c.fd, 414,
                   fmt::format("The request line is longer than {} bytes.", kMaxRequestLineBytes));
  } else {
    send_error_now(c.fd, 431,
                   fmt::format("The request's header fields are too large: a line over {} "
                               "bytes, or over {} bytes in all.",
                               kMaxHeaderLineBytes, kMaxHeadBytes));
  }
  begin_linger(c);
}

void ConnectionGate::begin_linger(Conn& c) {
  ::shutdown(c.fd, SHUT_WR);  // the answer, then FIN
  c.lingering = true;
  c.bytes.clear();
  c.bytes.shrink_to_fit();
  c.deadline = Clock::now() + kLingerTimeout;
}

void ConnectionGate::close_parked(int fd) {
  std::lock_guard lock(mu_);
  if (parked_.erase(fd) == 0) return;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  close_fd(fd);
}

void ConnectionGate::close_fd(int fd) {
  ::close(fd);
  --open_;
}

namespace {

// httplib's task queue for its accept loop: each job admits one connection, at once, on the
// accept thread; the workers are the gate's. Its shutdown (the accept loop's end) stops
// the gate.
class AdmitQueue : public httplib::TaskQueue {
 public:
  explicit AdmitQueue(ConnectionGate& gate) : gate_(gate) {}
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override { gate_.stop(); }

 private:
  ConnectionGate& gate_;
};

std::chrono::milliseconds millis(time_t sec, time_t usec) {
  return std::chrono::milliseconds(sec * 1000 + usec / 1000);
}

size_t max_connections(size_t workers) {
  size_t descriptors = 1024;
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    descriptors = limit.rlim_cur;
  const size_t available =
      descriptors > 2 * kReservedDescriptors ? descriptors - kReservedDescriptors : descriptors / 2;
  return std::min(kConnectionsPerWorker * workers, available);
}

}  // namespace

GatedServer::GatedServer() {
  new_task_queue = [this] {
    GateLimits limits;
    limits.workers = workers_;
    limits.max_connections = max_connections(workers_);
    limits.keep_alive_timeout = millis(keep_alive_timeout_sec_, 0);
    limits.keep_alive_max_count = keep_alive_max_count_;
    limits.read_timeout = millis(read_timeout_sec_, read_timeout_usec_);
    limits.write_timeout = millis(write_timeout_sec_, write_timeout_usec_);
    limits.max_body_bytes = payload_max_length_;
    gate_ = std::make_unique<ConnectionGate>(
        limits, [this](httplib::Stream& stream, bool last, bool& client_closes) {
          return process_request(stream, last, client_closes, nullptr);
        });
    return new AdmitQueue(*gate_);
  };
}

GatedServer::~GatedServer() = default;

void GatedServer::set_workers(size_t workers) { workers_ = workers; }

bool GatedServer::process_and_close_socket(socket_t sock) {
  gate_->admit(sock);
  return true;
}

}  // namespace kestrel::server
