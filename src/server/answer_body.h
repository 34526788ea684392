// What the generation endpoints (generate_handler.cc, responses_handler.cc,
// messages_handler.cc) share in writing an answer: how often they poll their Generation and
// ping an idle stream, the wait for a whole answer that stops when its client hangs up, a
// stream's write or ping, the time stamp of a response, and a JSON body written so that
// shutdown waits for it.
#pragma once

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/logging.h"
#include "server/connections.h"
#include "server/generation.h"
#include "server/server_state.h"

namespace kestrel::server {

// How long a poll of a Generation waits for the model's next text.
constexpr std::chrono::milliseconds kPollInterval{500};
// A stream that got nothing to send for this long writes an SSE comment, so that a client
// that went away while its request waited is noticed (the write fails) and aborted.
constexpr auto kPingInterval = std::chrono::seconds(2);

// Calls poll() (which polls `gen`, up to kPollInterval, and takes what came) until `gen` is
// done. A client that hangs up stops it: a response that writes nothing until the end looks
// at the socket between polls (streams see it when a write fails). False then, with
// `res.status` 499 (nobody reads it); the caller returns, and destroying `gen` aborts its
// engine requests.
template <typename Poll>
bool poll_until_done(const Generation& gen, const httplib::Request& http_req,
                     httplib::Response& res, Poll&& poll) {
  const int connection = find_connection(http_req.local_port, http_req.remote_port);
  while (!gen.done()) {
    poll();
    if (connection >= 0 && !gen.done() && !peer_open(connection)) {
      KS_LOG_DEBUG("{}: the client closed the connection; aborted", gen.id());
      res.status = 499;
      return false;
    }
  }
  return true;
}

// A stream's write of `out`, or of `ping` where `out` is empty and nothing was written for
// kPingInterval (so that a client that went away is noticed); `last_write` is when the last
// bytes went. False when the client is gone.
inline bool write_or_ping(httplib::DataSink& sink, std::string out, Clock::time_point& last_write,
                          std::string_view ping = ": ping\n\n") {
  if (out.empty() && Clock::now() - last_write >= kPingInterval) out = ping;
  if (out.empty()) return true;
  last_write = Clock::now();
  return sink.write(out.data(), out.size());
}

// Seconds since the epoch: OpenAI's `created` / `created_at`.
inline int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The body goes out through a content provider so that the in-flight count (which shutdown
// waits for) drops only once the response was written. Json: nlohmann's json or ordered_json.
template <typename Json>
void set_json_body(httplib::Response& res, const Json& body, std::shared_ptr<InflightGuard> guard) {
  auto text = std::make_shared<std::string>(
      body.dump(-1, ' ', false, Json::error_handler_t::replace));
  res.set_content_provider(
      text->size(), "application/json",
      [text](size_t offset, size_t length, httplib::DataSink& sink) {
        return sink.write(text->data() + offset, std::min(length, text->size() - offset));
      },
      [guard = std::move(guard)](bool) {});
}

}  // namespace kestrel::server
