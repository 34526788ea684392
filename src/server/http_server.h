// HttpServer: the OpenAI-compatible HTTP server (cpp-httplib) over one LLM.
//
//   kestrel::LLM llm(model_dir, engine_config);
//   kestrel::server::HttpServer server(llm, {.host = "127.0.0.1", .port = 8000});
//   server.start();      // serving on background threads
//   ...                  // e.g. wait for SIGTERM
//   server.shutdown();   // graceful, bounded by shutdown_timeout_s
//
// Endpoints: GET /v1/models, POST /v1/completions, POST /v1/chat/completions (both with
// SSE streaming), GET /health, GET /metrics (Prometheus). docs/server.md has the details.
//
// Threads: a pool of http_threads workers runs the handlers, one request each (a connection
// holds a worker only while a request of it is read and answered: connection_gate.h); one
// poller thread reads request heads and watches idle connections, at most 8 x http_threads
// of them (more get a 503); one engine thread owns the LLM's engine (EngineLoop). While the
// server runs, nothing else may use the LLM.
//
// Process-wide effect: start() ignores SIGPIPE (writes to a client that went away must
// fail, not kill the process).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include <vector>

#include "kestrel/llm.h"

namespace kestrel::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (see HttpServer::port())
  // The name clients use in "model" and /v1/models lists. "" : the model directory's name.
  std::string served_model_name;
  std::string model_dir;  // for the default name and /v1/models' "root"
  // When not empty, /v1/* requests need "Authorization: Bearer <api_key>" (else 401).
  std::string api_key;
  size_t max_body_bytes = size_t{16} << 20;  // larger bodies get 413
  int http_threads = 512;
  // On shutdown: how long in-flight requests may run before they are aborted.
  double shutdown_timeout_s = 5.0;
  int keep_alive_timeout_s = 5;
  // CORS: browser origins ("https://app.example", or "*" for any) whose pages may call the
  // API; their preflight OPTIONS requests are answered (204) without the API key. Empty: no
  // CORS headers, as before.
  std::vector<std::string> allowed_origins;
  // "qwen3": chat responses carry the <think> part as reasoning_content (reasoning.h), and
  // a chat's structured output constrains the answer after the thinking. Empty: thinking
  // stays in content, as vLLM without a parser.
  std::string reasoning_parser;
  // With reasoning_parser: the structured output constrains the thinking too (vLLM's
  // structured outputs option enable_in_reasoning).
  bool structured_outputs_in_reasoning = false;
  // "hermes", "llama3_json", "pythonic" or "mistral": chat requests with `tools` get the model's tool-call markup
  // as message.tool_calls (tool_calls.h). Empty: calls stay text, as vLLM without a parser.
  std::string tool_call_parser;
  // Responses API: how many responses are kept for previous_response_id and GET / DELETE
  // /v1/responses/{id} (response_store.h; the oldest go first, and at most 256 MiB of them).
  // 0: none (previous_response_id is then a 400).
  size_t responses_store_max = 1024;
};

class HttpServer {
 public:
  // Throws kestrel::Error for a bad config (no port, no threads, ...).
  HttpServer(LLM& llm, ServerConfig config);
  ~HttpServer();  // shutdown()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port and starts serving. Throws kestrel::Error when the address cannot be
  // bound. Call once.
  void start();
  // The bound port (after start()).
  int port() const;
  const std::string& served_model_name() const;

  // Graceful shutdown: stops accepting connections at once, answers 503 to requests that
  // arrive on open connections, lets in-flight requests run for up to shutdown_timeout_s,
  // then aborts the rest (streams end with finish_reason "abort" and [DONE]), closes idle
  // connections and joins every thread. Returns within about shutdown_timeout_s plus the
  // time to write the last responses (bounded by httplib's 5 s write timeout). Idempotent.
  void shutdown();
  // False once the listener has stopped (after shutdown(), or if it failed).
  bool serving() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel::server
