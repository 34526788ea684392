// What the generation endpoints (generate_handler.cc, responses_handler.cc) share in writing
// an answer: how often they poll their Generation and ping an idle stream, the time stamp of
// a response, and a JSON body written so that shutdown waits for it.
#pragma once

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "server/server_state.h"

namespace kestrel::server {

// How long a poll of a Generation waits for the model's next text.
constexpr std::chrono::milliseconds kPollInterval{500};
// A stream that got nothing to send for this long writes an SSE comment, so that a client
// that went away while its request waited is noticed (the write fails) and aborted.
constexpr auto kPingInterval = std::chrono::seconds(2);

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
