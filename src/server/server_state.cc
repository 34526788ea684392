#include "server/server_state.h"

#include <fmt/format.h>

#include <random>

#include "server/background_responses.h"
#include "server/mistral_calls.h"

namespace kestrel::server {

using std::chrono::milliseconds;

ServerState::ServerState() : id_salt_(std::random_device{}() * 0x9E3779B97F4A7C15ull) {}

// Here, where BackgroundResponses is whole.
ServerState::~ServerState() = default;

std::string ServerState::new_request_id(const char* prefix) {
  return fmt::format("{}{:016x}{:08x}", prefix, id_salt_, next_id_++);
}

std::string ServerState::new_tool_call_id() {
  if (config.tool_call_parser == "mistral") return mistral_call_id(id_salt_, next_id_++);
  return new_request_id("chatcmpl-tool-");
}

bool ServerState::wait_idle(milliseconds timeout) {
  std::unique_lock lock(mu);
  return cv.wait_for(lock, timeout, [&] { return inflight == 0; });
}

InflightGuard::InflightGuard(ServerState& state) : state_(state) {
  std::lock_guard lock(state_.mu);
  ++state_.inflight;
}

InflightGuard::~InflightGuard() {
  {
    std::lock_guard lock(state_.mu);
    --state_.inflight;
  }
  state_.cv.notify_all();
}

}  // namespace kestrel::server
