// An httplib::Stream over an accepted TCP socket that first hands out bytes already read from
// it (the request head the ConnectionGate gathered), then reads the socket itself.
//
// httplib 0.11's own SocketStream is not in its public header, and it reads ahead into a
// buffer that dies with the stream: bytes of a next, pipelined request would be lost when
// the connection goes back to the gate. This stream reads ahead only what it is asked for
// and gives back what it holds (take_buffered).
#pragma once

#include <httplib.h>

#include <chrono>
#include <string>
#include <string_view>

namespace kestrel::server {

class SocketStream final : public httplib::Stream {
 public:
  // `fd` stays owned by the caller. Reads wait at most `read_timeout` for data, writes at
  // most `write_timeout` for room (httplib's read and write timeouts).
  SocketStream(int fd, std::string buffered, std::chrono::milliseconds read_timeout,
               std::chrono::milliseconds write_timeout);

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return fd_; }

  // The bytes read from the socket and not yet handed out (a pipelined request's); the
  // stream holds none afterwards.
  std::string take_buffered();
  // The same bytes, left in place.
  std::string_view buffered() const { return std::string_view(buffered_).substr(offset_); }
  // Bytes to hand out before reading the socket again.
  void set_buffered(std::string bytes);

 private:
  int fd_;
  std::string buffered_;
  size_t offset_ = 0;  // buffered_[offset_, size) is still to be handed out
  std::chrono::milliseconds read_timeout_;
  std::chrono::milliseconds write_timeout_;
};

}  // namespace kestrel::server
