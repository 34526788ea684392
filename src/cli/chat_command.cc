#include <signal.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/flags.h"
#include "core/error.h"
#include "kestrel/llm.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

constexpr const char* kHelp =
    "/reset  clear the conversation (the system message stays)\n"
    "/exit   quit (also /quit, or end of input: Ctrl-D)\n"
    "/help   this list\n"
    "Ctrl-C during a reply stops that reply; the part already shown stays in the conversation.\n";

std::atomic<bool> g_interrupted{false};
void on_sigint(int) { g_interrupted = true; }

// SIGINT sets g_interrupted while this lives (a reply is streaming); before and after, Ctrl-C
// ends the program as usual.
class InterruptScope {
 public:
  InterruptScope() {
    g_interrupted = false;
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &previous_);
  }
  ~InterruptScope() { sigaction(SIGINT, &previous_, nullptr); }
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

 private:
  struct sigaction previous_ {};
};

struct ReplyInterrupted {};

}  // namespace

// An interactive multi-turn chat on the terminal: each user line goes through the model's
// chat template with the conversation so far, and the reply streams as it is generated.
Runner add_chat_command(CLI::App& app) {
  struct Options {
    std::string model;
    std::string system;
    bool enable_thinking = false;
    EngineConfig engine;
    SamplingFlags sampling;
    std::string log_level = "warn";
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "chat", "interactive multi-turn chat that streams tokens (/help lists the commands; Ctrl-C "
              "stops a reply)");
  cmd->add_option("--model", o->model, "Hugging Face model directory")->required();
  cmd->add_option("--system", o->system, "system message");
  cmd->add_flag("--enable-thinking", o->enable_thinking, "let Qwen3 think before answering");
  add_engine_flags(*cmd, o->engine);
  add_sampling_flags(*cmd, o->sampling);
  add_log_flag(*cmd, o->log_level);
  return [o] {
    set_log_level(o->log_level);
    LLM llm(o->model, o->engine);
    KS_CHECK(llm.tokenizer() != nullptr, "chat needs tokenizer.json in {}", o->model);
    SamplingParams defaults = llm.default_sampling_params();
    defaults.max_tokens = 512;
    const SamplingParams params = o->sampling.apply(defaults);
    const nlohmann::ordered_json extra = {{"enable_thinking", o->enable_thinking}};

    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    auto reset = [&] {
      messages = nlohmann::ordered_json::array();
      if (!o->system.empty()) messages.push_back({{"role", "system"}, {"content", o->system}});
    };
    reset();
    std::string line;
    while (true) {
      std::printf("> ");
      std::fflush(stdout);
      if (!std::getline(std::cin, line) || line == "/exit" || line == "/quit") break;
      if (line == "/reset") {
        reset();
        std::printf("(conversation cleared)\n");
        continue;
      }
      if (line == "/help") {
        std::printf("%s", kHelp);
        continue;
      }
      // A lone unknown "/word" is a mistyped command, not a message for the model.
      if (line.size() > 1 && line[0] == '/' && line.find(' ') == std::string::npos &&
          line.find('/', 1) == std::string::npos) {
        std::printf("unknown command %s; /help lists them\n", line.c_str());
        continue;
      }
      if (line.empty()) continue;
      messages.push_back({{"role", "user"}, {"content", line}});
      const std::string prompt = llm.apply_chat_template(messages, true, extra);
      // The template already holds the special tokens: do not add BOS again.
      const std::vector<int> ids = llm.tokenizer()->encode(prompt, false);
      std::string reply;
      try {
        InterruptScope interrupt;
        const RequestOutput out = llm.generate_streaming(ids, params, [&](const std::string& text) {
          if (g_interrupted) throw ReplyInterrupted{};  // aborts the request, then lands below
          std::fwrite(text.data(), 1, text.size(), stdout);
          std::fflush(stdout);
          reply += text;
        });
        reply = out.outputs[0].text;
        std::printf("\n");
      } catch (const ReplyInterrupted&) {
        std::printf(" [stopped]\n");
      }
      messages.push_back({{"role", "assistant"}, {"content", reply}});
    }
    return 0;
  };
}

}  // namespace kestrel::cli
