// kestrel serve: the OpenAI-compatible HTTP server (src/server/http_server.h).
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/flags.h"
#include "core/logging.h"
#include "kestrel/llm.h"
#include "server/http_server.h"

namespace kestrel::cli {

Runner add_serve_command(CLI::App& app) {
  struct Options {
    std::string model;
    server::ServerConfig server;
    EngineConfig engine;
    std::string log_level = "info";
    bool auto_tool_choice = false;  // vLLM's flag; implied here
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("serve",
                                     "OpenAI-compatible HTTP server (/v1/completions, "
                                     "/v1/chat/completions, /v1/models, /metrics)");
  cmd->add_option("--model", o->model, "Hugging Face model directory")->required();
  cmd->add_option("--host", o->server.host,
                  "address to listen on; the default answers this machine only (0.0.0.0: every "
                  "interface, so other machines can connect)")
      ->capture_default_str();
  cmd->add_option("--port", o->server.port, "port; 0 = any free port (printed at start)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--served-model-name", o->server.served_model_name,
                  "model name in the API (default: the model directory's name)");
  cmd->add_option("--api-key", o->server.api_key, "require 'Authorization: Bearer <key>' on /v1/*");
  cmd->add_option("--reasoning-parser", o->server.reasoning_parser,
                  "qwen3: chat responses put the <think>...</think> part in reasoning_content "
                  "(vLLM's field), streamed too; default: thinking stays in content")
      ->check(CLI::IsMember({"qwen3"}));
  cmd->add_flag("--structured-outputs-in-reasoning", o->server.structured_outputs_in_reasoning,
                "with --reasoning-parser: structured outputs (response_format, guided_*, forced "
                "tool calls) constrain the thinking too; by default they constrain the answer "
                "after </think> (vLLM's enable_in_reasoning)");
  cmd->add_option("--tool-call-parser", o->server.tool_call_parser,
                  "chat requests with tools get the model's calls as message.tool_calls, "
                  "streamed too: hermes (<tool_call>{json}</tool_call>: Qwen2.5, Qwen3, Hermes) "
                  "llama3_json (a JSON object answer: Llama 3.1-3.3), pythonic (a Python "
                  "list of calls: Llama 3.2, Llama 4) or mistral ([TOOL_CALLS] and a JSON list)")
      ->check(CLI::IsMember({"hermes", "llama3_json", "pythonic", "mistral"}));
  // vLLM needs this beside --tool-call-parser; here the parser alone turns it on.
  cmd->add_flag("--enable-auto-tool-choice", o->auto_tool_choice,
                "accepted for vLLM compatibility (implied by --tool-call-parser)");
  cmd->add_option("--allowed-origins", o->server.allowed_origins,
                  "CORS: browser origins allowed to call the API (repeatable, or comma-separated; "
                  "'*' for any); default none")
      ->delimiter(',')
      ->allow_extra_args(false);
  cmd->add_option("--max-body-bytes", o->server.max_body_bytes, "larger request bodies get 413")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--http-threads", o->server.http_threads,
                  "HTTP worker threads = most requests served at once (open connections: up to 8x as many)")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--shutdown-timeout", o->server.shutdown_timeout_s,
                  "seconds in-flight requests may run after SIGINT/SIGTERM before they are aborted")
      ->check(at_least(0))
      ->capture_default_str();
  cmd->add_option("--responses-store-max", o->server.responses_store_max,
                  "Responses API: responses kept in memory for previous_response_id and GET/DELETE "
                  "/v1/responses/{id} (oldest dropped first; at most 256 MiB); 0 = none")
      ->capture_default_str();
  cmd->add_option("--keep-alive-timeout", o->server.keep_alive_timeout_s,
                  "idle connection timeout (s)")
      ->check(at_least(1))
      ->capture_default_str();
  add_engine_flags(*cmd, o->engine);
  add_log_flag(*cmd, o->log_level);
  return [o] {
    set_log_level(o->log_level);
    // Block the shutdown signals in every thread (the engine's and the server's inherit the
    // mask) so that only sigtimedwait below receives them.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);

    LLM llm(o->model, o->engine);
    o->server.model_dir = o->model;
    server::HttpServer server(llm, o->server);
    server.start();
    std::printf("kestrel serve: %s (%s, max_model_len %d) listening on http://%s:%d\n",
                server.served_model_name().c_str(), llm.device().c_str(), llm.max_model_len(),
                o->server.host.c_str(), server.port());
    std::fflush(stdout);

    const timespec poll{0, 200'000'000};
    int sig = -1;
    std::string fatal;
    while (server.serving()) {
      sig = sigtimedwait(&signals, nullptr, &poll);
      if (sig == SIGINT || sig == SIGTERM) break;
      // A tensor-parallel group that lost a rank serves nobody again: stop, and say why.
      fatal = llm.fatal_error();
      if (!fatal.empty()) break;
    }
    if (!fatal.empty()) {
      std::fprintf(stderr, "error: %s\n", fatal.c_str());
      server.shutdown();
      return 1;
    }
    if (sig == SIGINT || sig == SIGTERM) {
      KS_LOG_INFO("signal {}: shutting down (in-flight requests get {} s)", sig,
                  o->server.shutdown_timeout_s);
      server.shutdown();
      std::printf("kestrel serve: shut down\n");
      return 0;
    }
    std::fprintf(stderr, "error: the HTTP listener stopped unexpectedly\n");
    return 1;
  };
}

}  // namespace kestrel::cli
