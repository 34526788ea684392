#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <string_view>
#include <thread>

#include "core/error.h"
#include "core/logging.h"
#include "server/answer_body.h"
#include "server/api_error.h"
#include "server/background_responses.h"
#include "server/connection_gate.h"
#include "server/connections.h"
#include "server/messages_format.h"
#include "server/messages_handler.h"
#include "server/server_state.h"
#include "kestrel/version.h"
#include "server/reasoning.h"
#include "server/request_framing.h"
#include "server/responses_handler.h"
#include "server/tokenize_handler.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::server {
namespace {

using json = nlohmann::json;

constexpr int kListenBacklog = 1024;
constexpr size_t kKeepAliveMaxCount = 1000;
// After the abort at the end of the shutdown timeout, in-flight handlers only have to
// notice it and write their last bytes.
constexpr auto kAbortGrace = std::chrono::seconds(6);

// An error's body: OpenAI's shape, or Anthropic's on the Messages API's paths.
void send_error(const httplib::Request& req, httplib::Response& res, int status, const json& body) {
  if (is_messages_path(req.path)) {
    std::string message = "error";
    if (body.contains("error") && body["error"].is_object()) message = body["error"].value("message", message);
    res.status = status;
    res.set_content(anthropic_error_body(status, message).dump(-1, ' ', false,
                                                               json::error_handler_t::replace),
                    "application/json");
    return;
  }
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

// The methods a route takes, or null for a path that is no route: another method on a route
// is a 405, not a 404.
const char* allowed_methods(const std::string& path) {
  if (path == "/v1/completions" || path == "/v1/chat/completions" || path == "/v1/responses" ||
      path == "/v1/messages" || path == "/v1/messages/count_tokens" || path == "/tokenize" ||
      path == "/detokenize") {
    return "POST";
  }
  if (path == "/health" || path == "/metrics" || path == "/version" || path == "/v1/models" ||
      path.rfind("/v1/models/", 0) == 0) {
    return "GET";
  }
  // A stored response (/v1/responses/{id}), its input items, and its cancel.
  constexpr std::string_view kResponse = "/v1/responses/", kItems = "/input_items",
                             kCancel = "/cancel";
  if (path.rfind(kResponse, 0) == 0) {
    const size_t slash = path.find('/', kResponse.size());
    if (slash == std::string::npos) return "GET, DELETE";
    if (slash > kResponse.size() && path.compare(slash, std::string::npos, kItems) == 0) return "GET";
    if (slash > kResponse.size() && path.compare(slash, std::string::npos, kCancel) == 0) return "POST";
  }
  return nullptr;
}

// True when `method` on `path` is one of the routes (allowed_methods).
bool routes(const std::string& method, const std::string& path) {
  const char* allowed = allowed_methods(path);
  if (allowed == nullptr) return false;
  for (std::string_view list = allowed; !list.empty();) {
    const size_t comma = list.find(", ");
    if (list.substr(0, comma) == method) return true;
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 2);
  }
  return false;
}

bool origin_allowed(const std::vector<std::string>& allowed, const std::string& origin) {
  for (const std::string& a : allowed) {
    if (a == "*" || a == origin) return true;
  }
  return false;
}

std::string default_model_name(const std::string& dir) {
  std::filesystem::path p(dir);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();  // trailing slash
  return p.empty() ? "model" : p.filename().string();
}

// Runs a handler so that no exception escapes: ApiError gives its status and body, a
// kestrel::Error (bad input found deeper down) a 400, anything else a 500.
template <typename F>
httplib::Server::Handler guarded(F f) {
  return [f](const httplib::Request& req, httplib::Response& res) {
    try {
      f(req, res);
    } catch (const ApiError& e) {
      send_error(req, res, e.status(), e.body());
    } catch (const Error& e) {
      send_error(req, res, 400, error_body(e.what(), "invalid_request_error"));
    } catch (const std::exception& e) {
      KS_LOG_ERROR("{} {}: {}", req.method, req.path, e.what());
      send_error(req, res, 500, error_body(e.what(), "server_error"));
    }
  };
}

// httplib 0.11 holds a request body to set_payload_max_length only when the request gives a
// Content-Length: a chunked one (Transfer-Encoding: chunked) is read whole, however long. So
// the POST routes read their bodies through this: past `max` bytes it stops reading and
// answers 413 (the error handler words it) on a connection it closes; a body that cannot be
// read (cut short, malformed chunks) is a 400, an empty one a 400 (unless `optional`: a
// route that takes no body, such as a cancel, where a POST with none must not wait for one),
// and a multipart form a 415.
httplib::Server::HandlerWithContentReader capped_body(size_t max, httplib::Server::Handler handler,
                                                      bool optional = false) {
  return [max, optional, handler = std::move(handler)](const httplib::Request& req,
                                                       httplib::Response& res,
                                                       const httplib::ContentReader& read) {
    if (req.is_multipart_form_data()) {  // httplib reads those only part by part
      send_error(req, res, 415,
                 error_body("multipart/form-data request bodies are not accepted; send JSON "
                            "with 'Content-Type: application/json'.",
                            "invalid_request_error"));
      res.set_header("Connection", "close");
      return;
    }
    std::string body;
    bool over = false;
    // Neither Content-Length nor Transfer-Encoding: no body (RFC 9112 section 6.3), where
    // httplib would read one until the client closes or its read timeout (5 s) passes.
    const bool framed = req.has_header("Content-Length") || req.has_header("Transfer-Encoding");
    const bool whole = !framed || read([&](const char* data, size_t n) {
      over = n > max - body.size();
      if (over) return false;  // stops the read: over the limit
      body.append(data, n);
      return true;
    });
    if (!whole) {
      res.set_header("Connection", "close");
      // httplib refuses a declared Content-Length over the limit before reading any of it.
      const std::string declared = req.get_header_value("Content-Length");
      over = over || (!declared.empty() && std::strtoull(declared.c_str(), nullptr, 10) > max);
      if (over) {
        res.status = 413;  // worded by the error handler
      } else {
        send_error(req, res, 400,
                   error_body("The request body could not be read: it ended before its "
                              "Content-Length, or its chunked or compressed encoding is "
                              "malformed.",
                              "invalid_request_error"));
      }
      return;
    }
    if (body.empty() && !optional) {
      send_error(req, res, 400,
                 error_body("The request body is empty; send a JSON object with "
                            "'Content-Type: application/json'.",
                            "invalid_request_error"));
      return;
    }
    // The Request is httplib's own object, which only this route sees from here on.
    const_cast<httplib::Request&>(req).body = std::move(body);
    handler(req, res);
  };
}

}  // namespace

struct HttpServer::Impl {
  LLM& llm;
  ServerState state;
  GatedServer http;
  std::thread listener;
  std::atomic<int> listen_fd{-1};
  std::atomic<bool> serving{false};
  int port = 0;
  bool started = false;
  bool shut_down = false;

  explicit Impl(LLM& l) : llm(l) {}
  void install_routes();
};

HttpServer::HttpServer(LLM& llm, ServerConfig config) : impl_(new Impl(llm)) {
  KS_CHECK(config.port >= 0 && config.port <= 65535, "port must be in [0, 65535], got {}",
           config.port);
  KS_CHECK(config.http_threads >= 1, "http_threads must be >= 1, got {}", config.http_threads);
  KS_CHECK(config.max_body_bytes >= 1, "max_body_bytes must be >= 1");
  KS_CHECK(config.reasoning_parser.empty() || known_reasoning_parser(config.reasoning_parser),
           "unknown reasoning parser '{}' (known: qwen3)", config.reasoning_parser);
  KS_CHECK(config.tool_call_parser.empty() || known_tool_call_parser(config.tool_call_parser),
           "unknown tool-call parser '{}' (known: hermes, llama3_json, pythonic, mistral)", config.tool_call_parser);
  KS_CHECK(config.shutdown_timeout_s >= 0, "shutdown_timeout must be >= 0, got {}",
           config.shutdown_timeout_s);
  if (config.served_model_name.empty())
    config.served_model_name = default_model_name(config.model_dir);
  ServerState& s = impl_->state;
  s.config = std::move(config);
  s.ctx.tokenizer = llm.tokenizer();
  if (s.ctx.tokenizer && !llm.chat_template_source().empty()) {
    try {
      s.chat_template = ChatTemplate::parse(llm.chat_template_source());
      s.ctx.chat_template = &*s.chat_template;
    } catch (const Error& e) {
      KS_LOG_WARN("the model's chat template cannot be parsed ({}); /v1/chat/completions is off",
                  e.what());
    }
  }
  s.ctx.defaults = llm.default_sampling_params();
  s.ctx.vocab_size = llm.vocab_size();
  if (s.ctx.tokenizer != nullptr) {
    s.grammars = std::make_unique<structured::GrammarCompiler>(std::make_shared<const structured::VocabTrie>(
        structured::VocabTrie::from_tokenizer(*s.ctx.tokenizer, s.ctx.vocab_size)));
    s.ctx.grammars = s.grammars.get();
  }
  s.ctx.max_model_len = llm.max_model_len();
  s.ctx.served_model_name = s.config.served_model_name;
  s.ctx.tool_call_parser = s.config.tool_call_parser;
  s.ctx.reasoning = !s.config.reasoning_parser.empty();
  s.ctx.structured_outputs_in_reasoning = s.config.structured_outputs_in_reasoning;
  if (s.ctx.reasoning && s.ctx.tokenizer != nullptr) {
    const auto open = s.ctx.tokenizer->token_to_id("<think>");
    const auto close = s.ctx.tokenizer->token_to_id("</think>");
    if (open && close && *open < s.ctx.vocab_size && *close < s.ctx.vocab_size) {
      s.ctx.think_tags = {*open, *close};
    } else {
      KS_LOG_WARN("the tokenizer has no <think> and </think> tokens: structured outputs "
                  "constrain the thinking too");
    }
  }
  s.responses = std::make_unique<ResponseStore>(s.config.responses_store_max);
  s.started_at = unix_seconds();
}

HttpServer::~HttpServer() { shutdown(); }

int HttpServer::port() const { return impl_->port; }
const std::string& HttpServer::served_model_name() const {
  return impl_->state.config.served_model_name;
}
bool HttpServer::serving() const { return impl_->serving; }

void HttpServer::Impl::install_routes() {
  ServerState& s = state;
  http.set_pre_routing_handler([&s](const httplib::Request& req, httplib::Response& res) {
    if (std::optional<ApiError> framing = framing_error(req)) {
      res.set_header("Connection", "close");  // its body cannot be told from a next request
      send_error(req, res, framing->status(), framing->body());
      return httplib::Server::HandlerResponse::Handled;
    }
    if (body_left_unread(req)) res.set_header("Connection", "close");
    if (const std::string origin = req.get_header_value("Origin");
        !origin.empty() && origin_allowed(s.config.allowed_origins, origin)) {
      res.set_header("Access-Control-Allow-Origin", origin);
      res.set_header("Vary", "Origin");
      if (req.method == "OPTIONS") {  // a browser's preflight: before any API key check
        const std::string asked = req.get_header_value("Access-Control-Request-Headers");
        res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
        res.set_header("Access-Control-Allow-Headers",
                       asked.empty() ? "Authorization, Content-Type, x-request-id" : asked);
        res.set_header("Access-Control-Max-Age", "600");
        res.status = 204;
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    // httplib applies a request's Range header to any response (a 206 with a slice of the
    // JSON, or a wrapped length past its end); API answers are whole, as uvicorn's are.
    // (The Request is httplib's own non-const object; only this hook sees it before routing.)
    const_cast<httplib::Request&>(req).ranges.clear();
    // vLLM's: a client's request id comes back on the response, whatever it is (refusals too).
    if (req.has_header("x-request-id")) res.set_header("x-request-id", req.get_header_value("x-request-id"));
    const bool api = req.path.rfind("/v1/", 0) == 0;
    // Anthropic's clients send the key as x-api-key.
    if (api && !s.config.api_key.empty() &&
        req.get_header_value("Authorization") != "Bearer " + s.config.api_key &&
        req.get_header_value("x-api-key") != s.config.api_key) {
      if (declares_body(req)) res.set_header("Connection", "close");  // its body is unread
      send_error(req, res, 401,
                 error_body("Incorrect API key provided.", "invalid_request_error", "",
                            "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (s.draining && req.path != "/metrics") {
      res.set_header("Connection", "close");
      send_error(req, res, 503, error_body("The server is shutting down.", "server_error"));
      return httplib::Server::HandlerResponse::Handled;
    }
    // httplib reads a POST's (PUT's, PATCH's, DELETE's) body before it finds no route for it,
    // and one with no framing headers until the client closes or 5 s pass. So such a request
    // to no route is answered here: 404, or 405 where the path is another method's route
    // (the error handler words both).
    const bool reads_body = req.method == "POST" || req.method == "PUT" ||
                            req.method == "PATCH" || req.method == "DELETE";
    if (reads_body && !declares_body(req) && !routes(req.method, req.path)) {
      res.status = 404;
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // httplib's own failures (no route, body too large, a request it cannot parse) have no
  // body.
  http.set_error_handler([&s](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    // httplib sets a request's ports once it has parsed its request line and headers; a 400
    // after that is a method it routes nowhere (TRACE, CONNECT).
    const bool parsed = req.local_port != -1;
    if (res.status == 400 && parsed) res.status = 404;
    std::string message;
    switch (res.status) {
      case 400:
        message = "Malformed HTTP request: the request line must be 'METHOD /path HTTP/1.1'.";
        res.set_header("Connection", "close");  // what follows cannot be told from a request
        break;
      case 404:
        if (const char* allow = allowed_methods(req.path)) {  // a route, another method
          res.status = 405;
          res.set_header("Allow", allow);
          message = fmt::format("Method Not Allowed: {} {} (allowed: {})", req.method, req.path, allow);
          break;
        }
        message = fmt::format("Not found: {} {}", req.method, req.path);
        break;
      case 413:
        // httplib caps form-encoded bodies (curl -d without a JSON Content-Type) at 8 KiB.
        message =
            req.get_header_value("Content-Type") == "application/x-www-form-urlencoded"
                ? "Form-encoded request bodies are limited to 8192 bytes; send JSON with "
                  "'Content-Type: application/json'."
                : fmt::format("The request body is larger than the server's limit of {} bytes.",
                              s.config.max_body_bytes);
        break;
      case 416:  // httplib checks a Range header before any handler can drop it
        message = "The Range header is malformed; answers are whole, so leave it out.";
        break;
      default:
        message = fmt::format("HTTP error {}", res.status);
    }
    send_error(req, res, res.status,
               error_body(message, res.status >= 500 ? "server_error" : "invalid_request_error"));
  });
  http.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr) {
        send_error(req, res, 500, error_body("internal server error", "server_error"));
      });

  http.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
  http.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
    res.set_content(s.metrics.render(s.loop->stats(), s.ctx.served_model_name),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  auto model_card = [&s] {
    return json{{"id", s.ctx.served_model_name},
                {"object", "model"},
                {"created", s.started_at},
                {"owned_by", "kestrel"},
                {"root", s.config.model_dir},
                {"parent", nullptr},
                {"max_model_len", s.ctx.max_model_len}};
  };
  http.Get("/v1/models", guarded([model_card](const httplib::Request&, httplib::Response& res) {
             res.set_content(json{{"object", "list"}, {"data", json::array({model_card()})}}.dump(),
                             "application/json");
           }));
  http.Get(R"(/v1/models/(.+))", guarded([&s, model_card](const httplib::Request& req,
                                                          httplib::Response& res) {
             const std::string id = req.matches[1];
             if (id != s.ctx.served_model_name) {
               throw ApiError(404, fmt::format("The model `{}` does not exist.", id), "model",
                              "invalid_request_error", "model_not_found");
             }
             res.set_content(model_card().dump(), "application/json");
           }));
  http.Get("/version", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(json{{"version", kVersion}}.dump(), "application/json");
  });
  const size_t max_body = s.config.max_body_bytes;
  http.Post("/tokenize",
            capped_body(max_body, guarded([&s](const httplib::Request& req,
                                               httplib::Response& res) {
              res.set_content(tokenize(s.ctx, req.body).dump(), "application/json");
            })));
  http.Post("/detokenize",
            capped_body(max_body, guarded([&s](const httplib::Request& req,
                                               httplib::Response& res) {
              res.set_content(detokenize(s.ctx, req.body).dump(), "application/json");
            })));
  http.Post("/v1/completions",
            capped_body(max_body, guarded([&s](const httplib::Request& req,
                                               httplib::Response& res) {
              handle_generate(s, req, res, false);
            })));
  http.Post("/v1/chat/completions",
            capped_body(max_body, guarded([&s](const httplib::Request& req,
                                               httplib::Response& res) {
              handle_generate(s, req, res, true);
            })));
  http.Post("/v1/responses",
            capped_body(max_body, guarded([&s](const httplib::Request& req,
                                               httplib::Response& res) {
              handle_responses(s, req, res);
            })));
  http.Post("/v1/messages",
            capped_body(max_body, guarded([&s](const httplib::Request& req,
                                               httplib::Response& res) {
              handle_messages(s, req, res);
            })));
  http.Post("/v1/messages/count_tokens",
            capped_body(max_body, guarded([&s](const httplib::Request& req,
                                               httplib::Response& res) {
              handle_count_tokens(s, req, res);
            })));
  http.Get(R"(/v1/responses/([^/]+))",
           guarded([&s](const httplib::Request& req, httplib::Response& res) {
             get_stored_response(s, req.matches[1], req, res);
           }));
  http.Get(R"(/v1/responses/([^/]+)/input_items)",
           guarded([&s](const httplib::Request& req, httplib::Response& res) {
             list_stored_input_items(s, req.matches[1], req, res);
           }));
  http.Post(R"(/v1/responses/([^/]+)/cancel)",
            capped_body(
                max_body,
                guarded([&s](const httplib::Request& req, httplib::Response& res) {
                  cancel_response(s, req.matches[1], res);
                }),
                /*optional=*/true));
  http.Delete(R"(/v1/responses/([^/]+))",
              guarded([&s](const httplib::Request& req, httplib::Response& res) {
                delete_stored_response(s, req.matches[1], res);
              }));
  http.set_post_routing_handler([](const httplib::Request&, httplib::Response& res) {
    // httplib adds its keep-alive terms to a response that closes the connection.
    if (res.get_header_value("Connection") == "close") res.headers.erase("Keep-Alive");
  });
  http.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    // httplib 0.11 reads on after such a response (a refused body left unread) as if the
    // connection were fine; the gate closes it.
    if (res.get_header_value("Connection") == "close") close_connection_after_response();
    KS_LOG_DEBUG("{} {} -> {}", req.method, req.path, res.status);
  });
}

void HttpServer::start() {
  Impl& im = *impl_;
  KS_CHECK(!im.started, "HttpServer::start: already started");
  im.started = true;
  std::signal(SIGPIPE, SIG_IGN);
  ServerState& s = im.state;
  s.loop = std::make_unique<EngineLoop>(im.llm, s.metrics);
  s.background = std::make_unique<BackgroundResponses>(s);
  im.install_routes();
  im.http.set_workers(size_t(s.config.http_threads));
  im.http.set_payload_max_length(s.config.max_body_bytes);
  im.http.set_keep_alive_timeout(s.config.keep_alive_timeout_s);
  im.http.set_keep_alive_max_count(kKeepAliveMaxCount);
  im.http.set_socket_options([&im](socket_t sock) {
    // Not httplib's defaults: they add SO_REUSEPORT, with which a second server on a port
    // in use binds too and silently takes part of the traffic. SO_REUSEADDR alone lets a
    // restart bind over connections in TIME_WAIT, and never beside a live listener.
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    im.listen_fd = sock;
  });
  const bool bound = s.config.port == 0
                         ? (im.port = im.http.bind_to_any_port(s.config.host)) > 0
                         : im.http.bind_to_port(s.config.host, im.port = s.config.port);
  if (!bound) {
    im.listen_fd = -1;  // httplib closed it; the number may be reused
    im.shut_down = true;
    s.loop->stop();
    throw_error("cannot listen on {}:{}: address already in use, or not an address of this "
                "machine",
                s.config.host, s.config.port);
  }
  // httplib listens with a backlog of 5; bursts of hundreds of clients need more.
  if (im.listen_fd >= 0) ::listen(im.listen_fd, kListenBacklog);
  im.serving = true;
  im.listener = std::thread([&im] {
    im.http.listen_after_bind();
    im.serving = false;
  });
  KS_LOG_INFO("serving {} on http://{}:{}", s.ctx.served_model_name, s.config.host, im.port);
}

void HttpServer::shutdown() {
  Impl& im = *impl_;
  if (!im.started || im.shut_down) return;
  im.shut_down = true;
  ServerState& s = im.state;
  s.draining = true;
  // Stop accepting: the accept loop fails and ends, but httplib keeps serving the open
  // connections (its stop() would cut streams off mid-way).
  // (Only while the accept loop runs: once it ended, httplib has closed the descriptor.)
  if (im.serving && im.listen_fd >= 0) ::shutdown(im.listen_fd, SHUT_RD);
  const auto timeout =
      std::chrono::milliseconds(static_cast<int64_t>(s.config.shutdown_timeout_s * 1000));
  if (!s.wait_idle(timeout)) {
    KS_LOG_WARN("shutdown: aborting the requests still running after {} s",
                s.config.shutdown_timeout_s);
    s.loop->abort_all();
    if (!s.wait_idle(std::chrono::duration_cast<std::chrono::milliseconds>(kAbortGrace))) {
      KS_LOG_WARN("shutdown: some responses could not be finished");
    }
  }
  // Idle keep-alive connections would hold their worker (and the join) for
  // keep_alive_timeout; nothing is in flight on them any more.
  close_connections_on_port(im.port);
  if (im.listener.joinable()) im.listener.join();
  s.background->stop();  // what still runs (past the drain's abort) ends "cancelled"
  s.loop->stop();
}

}  // namespace kestrel::server
