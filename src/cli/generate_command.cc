#include <cstdio>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/structured_flags.h"
#include "core/error.h"
#include "kestrel/llm.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {

namespace {

std::vector<int> parse_ids(const std::string& s) {
  std::vector<int> ids;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    KS_CHECK(used > 0 && used == item.size(), "--prompt-ids: '{}' is not an integer", item);
    ids.push_back(v);
  }
  return ids;
}

void print_output(const RequestOutput& out, const Tokenizer* tok, const std::string& prompt) {
  for (const CompletionOutput& c : out.outputs) {
    std::printf("--- prompt: %s\n", prompt.c_str());
    if (out.outputs.size() > 1) std::printf("--- sample %d\n", c.index);
    if (tok) std::printf("%s\n", c.text.c_str());
    std::printf("--- %zu tokens, finish_reason=%s, token ids:", c.token_ids.size(),
                c.finish_reason.c_str());
    for (int id : c.token_ids) std::printf(" %d", id);
    std::printf("\n");
    for (size_t i = 0; i < c.logprobs.size(); ++i) {
      const TokenLogprobs& lp = c.logprobs[i];
      std::printf("    [%zu] %d logprob=%.4f rank=%d top:", i, lp.token_id, lp.logprob, lp.rank);
      for (auto& [id, l] : lp.top) std::printf(" %d:%.4f", id, l);
      std::printf("\n");
    }
  }
}

}  // namespace

Runner add_generate_command(CLI::App& app) {
  struct Options {
    std::string model;
    std::vector<std::string> prompts;
    std::vector<std::string> prompt_ids;
    std::vector<std::string> messages;
    bool chat = false;
    bool enable_thinking = false;
    EngineConfig engine;
    SamplingFlags sampling;
    StructuredFlags structured;
    std::string log_level = "warn";
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("generate", "generate from text or token-id prompts");
  cmd->add_option("--model", o->model, "Hugging Face model directory")->required();
  // One value per flag (allow_extra_args off): CLI11 would otherwise read a bracketed value
  // ("[a,b]", a JSON array of messages) as a list of several.
  cmd->add_option("-p,--prompt", o->prompts, "text prompt (repeatable)")->allow_extra_args(false);
  cmd->add_option("--prompt-ids", o->prompt_ids, "comma-separated token ids (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--messages", o->messages,
                  "chat messages as a JSON array of {role, content} (repeatable); rendered "
                  "with the model's chat template")
      ->allow_extra_args(false);
  cmd->add_flag("--chat", o->chat, "send each --prompt as one user message through the chat template");
  cmd->add_flag("--enable-thinking", o->enable_thinking, "chat template variable enable_thinking");
  add_engine_flags(*cmd, o->engine);
  add_sampling_flags(*cmd, o->sampling);
  add_structured_flags(*cmd, o->structured);
  add_log_flag(*cmd, o->log_level);
  return [o] {
    set_log_level(o->log_level);
    KS_CHECK(!o->prompts.empty() || !o->prompt_ids.empty() || !o->messages.empty(),
             "give at least one --prompt, --prompt-ids or --messages");
    LLM llm(o->model, o->engine);
    SamplingParams defaults = llm.default_sampling_params();
    defaults.max_tokens = 64;
    SamplingParams params = o->sampling.apply(defaults);
    params.constraint = compile_structured_flags(o->structured, llm);

    std::vector<std::vector<int>> prompts;
    std::vector<std::string> labels;
    KS_CHECK(llm.tokenizer() != nullptr || (o->prompts.empty() && o->messages.empty()),
             "--prompt and --messages need tokenizer.json in {}; use --prompt-ids", o->model);
    const nlohmann::ordered_json extra = {{"enable_thinking", o->enable_thinking}};
    auto add_chat = [&](const nlohmann::ordered_json& messages, const std::string& label) {
      // The rendered template holds its own special tokens: no BOS is added again.
      prompts.push_back(llm.tokenizer()->encode(llm.apply_chat_template(messages, true, extra), false));
      labels.push_back(label);
    };
    for (const std::string& text : o->prompts) {
      if (o->chat) {
        add_chat(nlohmann::ordered_json::array({{{"role", "user"}, {"content", text}}}), text);
      } else {
        prompts.push_back(llm.tokenizer()->encode(text, true));
        labels.push_back(text);
      }
    }
    for (const std::string& json : o->messages) {
      nlohmann::ordered_json messages;
      try {
        messages = nlohmann::ordered_json::parse(json);
      } catch (const nlohmann::json::exception& e) {
        throw_error("--messages is not valid JSON: {}", e.what());
      }
      KS_CHECK(messages.is_array() && !messages.empty(), "--messages must be a non-empty JSON array");
      add_chat(messages, json);
    }
    for (const std::string& ids : o->prompt_ids) {
      prompts.push_back(parse_ids(ids));
      labels.push_back("[" + ids + "]");
    }
    std::vector<RequestOutput> outputs = llm.generate(prompts, params);
    for (size_t i = 0; i < outputs.size(); ++i) print_output(outputs[i], llm.tokenizer(), labels[i]);
    return 0;
  };
}

}  // namespace kestrel::cli
