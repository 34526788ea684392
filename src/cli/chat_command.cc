#include <cstdio>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/flags.h"
#include "core/error.h"
#include "kestrel/llm.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {

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
      "chat", "interactive multi-turn chat that streams tokens (/reset clears, /exit quits)");
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
      if (!std::getline(std::cin, line) || line == "/exit") break;
      if (line == "/reset") {
        reset();
        continue;
      }
      if (line.empty()) continue;
      messages.push_back({{"role", "user"}, {"content", line}});
      const std::string prompt = llm.apply_chat_template(messages, true, extra);
      // The template already holds the special tokens: do not add BOS again.
      const std::vector<int> ids = llm.tokenizer()->encode(prompt, false);
      const RequestOutput out = llm.generate_streaming(ids, params, [](const std::string& text) {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
      });
      std::printf("\n");
      messages.push_back({{"role", "assistant"}, {"content", out.outputs[0].text}});
    }
    return 0;
  };
}

}  // namespace kestrel::cli
