// What the HTTP handlers share: the model facts, the engine loop, metrics, and the count of
// requests in flight that shutdown waits for. Internal to src/server.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "chat/chat_template.h"
#include "server/engine_loop.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/request_parser.h"
#include "server/response_store.h"
#include "structured/grammar_compiler.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace kestrel::server {

class BackgroundResponses;

struct ServerState {
  ServerConfig config;
  std::optional<ChatTemplate> chat_template;
  ServingContext ctx;
  std::unique_ptr<structured::GrammarCompiler> grammars;  // ctx.grammars
  int64_t started_at = 0;  // Unix seconds
  ServerMetrics metrics;
  std::unique_ptr<EngineLoop> loop;
  std::unique_ptr<ResponseStore> responses;  // never null once the server is made
  // Responses run past their request (`background: true`); never null once the server has
  // started. After `responses` and `loop`, so that it goes first.
  std::unique_ptr<BackgroundResponses> background;
  std::atomic<bool> draining{false};

  std::mutex mu;
  std::condition_variable cv;
  int inflight = 0;  // generation requests not yet fully answered

  // "<prefix><random hex><counter hex>": unique per server run.
  std::string new_request_id(const char* prefix);
  // A chat tool call's id: "chatcmpl-tool-..." as above, or under --tool-call-parser mistral
  // nine letters and digits (mistral_calls.h: Mistral's templates refuse other ids).
  std::string new_tool_call_id();
  // Waits until nothing is in flight or `timeout` passes; true when nothing is.
  bool wait_idle(std::chrono::milliseconds timeout);

 private:
  std::atomic<uint64_t> next_id_{0};
  const uint64_t id_salt_;

 public:
  ServerState();
  ~ServerState();
};

// Counts one request as in flight for as long as it lives.
class InflightGuard {
 public:
  explicit InflightGuard(ServerState& state);
  ~InflightGuard();
  InflightGuard(const InflightGuard&) = delete;
  InflightGuard& operator=(const InflightGuard&) = delete;

 private:
  ServerState& state_;
};

// POST /v1/completions (chat = false) and /v1/chat/completions (chat = true).
void handle_generate(ServerState& state, const httplib::Request& req, httplib::Response& res,
                     bool chat);

}  // namespace kestrel::server
