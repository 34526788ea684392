// POST /v1/chat/completions: messages rendered through the model's chat template (tools,
// documents and chat_template_kwargs passed to it, as vLLM does), then tokenized.
#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

#include "chat/template_error.h"
#include "core/error.h"
#include "core/json_parse.h"
#include "server/api_error.h"
#include "server/reasoning.h"
#include "server/request_fields.h"
#include "server/request_parser.h"
#include "server/tool_choice.h"

namespace kestrel::server {

// Most keys a request's chat_template_kwargs may have.
constexpr size_t kMaxTemplateKwargs = 256;
// Most messages a chat request may have (25,000 took 0.3 s to render on a CPU core).
constexpr size_t kMaxMessages = 10000;

namespace {

using ojson = nlohmann::ordered_json;

// Checks the shape of `messages`, joins list-of-text-parts content into strings, and (as
// vLLM does for Hugging Face templates) turns tool-call arguments given as JSON text into
// objects, since templates such as Qwen3's print them with tojson.
ojson prepare_messages(const FieldReader& f) {
  const ojson* messages = f.find("messages");
  if (!messages) throw_bad_request("messages", "'messages' is required");
  if (!messages->is_array()) {
    throw_bad_request("messages", "'messages' must be a list, got {}", json_type_name(*messages));
  }
  if (messages->empty()) throw_bad_request("messages", "'messages' must not be empty");
  // The template's cost grows faster than the list: 400,000 one-letter messages (13 MB, under
  // the body limit) held a core for 47 s before the template's own limit refused them.
  if (messages->size() > kMaxMessages) {
    throw_bad_request("messages", "'messages' has {} entries; at most {}", messages->size(),
                      kMaxMessages);
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    const ojson& m = (*messages)[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object())
      throw_bad_request("messages", "{} must be an object, got {}", where, json_type_name(m));
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      throw_bad_request("messages", "{} needs a string 'role'", where);
    }
    auto content = m.find("content");
    if (content != m.end() && !content->is_string() && !content->is_array() &&
        !content->is_null()) {
      throw_bad_request("messages",
                        "{}.content must be a string or a list of content parts, got {}", where,
                        json_type_name(*content));
    }
  }
  ojson out;
  try {
    out = flatten_text_content(*messages);
  } catch (const Error& e) {
    throw_bad_request("messages", "{} (only text content parts are supported)", e.what());
  }
  for (size_t i = 0; i < out.size(); ++i) {
    ojson& m = out[i];
    // An assistant turn that only calls tools comes with content null or absent (what the
    // OpenAI SDKs send back); templates test and print content as a string.
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      if (m["role"] != "assistant") {
        throw_bad_request("messages", "messages[{}] (role '{}') needs 'content'", i,
                          m["role"].get<std::string>());
      }
      m["content"] = "";
    }
    auto calls = m.find("tool_calls");
    if (calls == m.end() || !calls->is_array()) continue;
    for (ojson& call : *calls) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
        continue;
      ojson& function = call["function"];
      auto args = function.find("arguments");
      if (args == function.end() || !args->is_string()) continue;
      try {
        *args = parse_untrusted_json(args->get<std::string>());
      } catch (const JsonLimitError& e) {
        throw_bad_request("messages", "a tool call's arguments {}", e.what());
      } catch (const nlohmann::json::exception&) {
        // not JSON: the template gets the text
      }
    }
  }
  return out;
}

// Roles every chat template is written for (check_roles takes "developer" as "system").
bool common_role(const std::string& role) {
  return role == "system" || role == "user" || role == "assistant" || role == "tool";
}

// A template skips a role it does not know (Qwen3's renders nothing for it), so a message
// of any other role would silently not reach the model: it is refused unless the template
// names the role in a string literal (Llama 3.1's "ipython", say). "developer" becomes
// "system" where the template does not name it.
void check_roles(ojson& messages, std::string_view template_source) {
  auto named = [&](const std::string& role) {
    return template_source.find("'" + role + "'") != std::string_view::npos ||
           template_source.find("\"" + role + "\"") != std::string_view::npos;
  };
  for (size_t i = 0; i < messages.size(); ++i) {
    ojson& role = messages[i]["role"];
    const std::string r = role.get<std::string>();
    if (common_role(r) || (!r.empty() && named(r))) continue;
    if (r == "developer") {
      role = "system";
      continue;
    }
    throw_bad_request("messages",
                      "messages[{}]: role '{}' is not one this model's chat template renders "
                      "(system, developer, user, assistant, tool)",
                      i, r);
  }
}

}  // namespace

GenerateRequest parse_chat_request(const nlohmann::ordered_json& body, const ServingContext& ctx) {
  const FieldReader f(body);
  f.reject_unknown(
      {// OpenAI
       "model", "messages", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs",
       "max_tokens", "max_completion_tokens", "n", "presence_penalty", "response_format", "seed",
       "stop", "stream", "stream_options", "temperature", "top_p", "tools", "tool_choice",
       "parallel_tool_calls", "user", "store", "metadata", "service_tier",
       // vLLM's extensions
       "best_of", "top_k", "min_p", "repetition_penalty", "stop_token_ids", "ignore_eos",
       "min_tokens", "skip_special_tokens", "include_stop_str_in_output", "chat_template",
       "chat_template_kwargs", "add_generation_prompt", "continue_final_message", "documents",
       "add_special_tokens", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
       "guided_decoding_backend", "guided_whitespace_pattern", "structured_outputs",
       "prompt_logprobs"});
  check_model(f, ctx);
  GenerateRequest req;
  req.chat = true;
  const std::optional<int> max_tokens = read_sampling_fields(f, ctx, req);

  req.logprobs = f.boolean("logprobs").value_or(false);
  const std::optional<int> top_logprobs = f.int32("top_logprobs");
  if (top_logprobs && !req.logprobs) {
    throw_bad_request("top_logprobs", "'top_logprobs' needs 'logprobs' to be true");
  }
  if (top_logprobs && (*top_logprobs < 0 || *top_logprobs > SamplingParams::kMaxLogprobs)) {
    throw_bad_request("top_logprobs", "'top_logprobs' must be in [0, {}], got {}",
                      SamplingParams::kMaxLogprobs, *top_logprobs);
  }
  if (req.logprobs) req.params.logprobs = top_logprobs.value_or(0);
  read_prompt_logprobs(f, req);
  req.parallel_tool_calls = f.boolean("parallel_tool_calls").value_or(true);
  (void)f.boolean("store");
  (void)f.string("service_tier");
  const ojson* tool_choice = f.find("tool_choice");
  const bool tool_choice_none = tool_choice != nullptr && *tool_choice == "none";

  ojson messages = prepare_messages(f);
  ojson extra = ojson::object();
  if (ctx.tokenizer) {
    extra["bos_token"] = ctx.tokenizer->bos_token();
    extra["eos_token"] = ctx.tokenizer->eos_token();
  }
  if (const ojson* tools = f.find("tools")) {
    if (!tools->is_array())
      throw_bad_request("tools", "'tools' must be a list, got {}", json_type_name(*tools));
    check_tools(*tools);
    extra["tools"] = *tools;
    req.tools = !tools->empty() && !tool_choice_none;
  }
  if (tool_choice != nullptr) force_tool_calls(*tool_choice, f.find("tools"), ctx, req);
  // Mistral's [TOOL_CALLS] and [ARGS] are special tokens: the parser needs them in the text
  // (vLLM's MistralToolParser.adjust_request does the same).
  if (req.tools && ctx.tool_call_parser == "mistral" && f.find("skip_special_tokens") == nullptr) {
    req.params.skip_special_tokens = false;
  }
  if (const ojson* documents = f.find("documents")) {
    if (!documents->is_array()) {
      throw_bad_request("documents", "'documents' must be a list, got {}", json_type_name(*documents));
    }
    extra["documents"] = *documents;
  }
  if (const ojson* kwargs = f.find("chat_template_kwargs")) {
    if (!kwargs->is_object()) {
      throw_bad_request("chat_template_kwargs", "'chat_template_kwargs' must be an object, got {}",
                        json_type_name(*kwargs));
    }
    // The template's variables are an ordered map (insertion costs a scan): 100,000 keys held
    // a request for 48 s. Templates read a handful.
    if (kwargs->size() > kMaxTemplateKwargs) {
      throw_bad_request("chat_template_kwargs", "'chat_template_kwargs' has {} keys; at most {}",
                        kwargs->size(), kMaxTemplateKwargs);
    }
    for (const auto& [key, value] : kwargs->items()) extra[key] = value;
  }
  const bool continue_final = f.boolean("continue_final_message").value_or(false);
  const bool add_generation_prompt = f.boolean("add_generation_prompt").value_or(!continue_final);
  if (continue_final && add_generation_prompt) {
    throw_bad_request("continue_final_message",
                      "'continue_final_message' and 'add_generation_prompt' cannot both be true");
  }

  if (ctx.tokenizer == nullptr) throw_bad_request("messages", "this model has no tokenizer");
  std::string prompt;
  try {
    if (auto source = f.string("chat_template")) {
      check_roles(messages, *source);
      prompt = ChatTemplate::parse(*source).render(
          make_chat_context(messages, add_generation_prompt, extra));
    } else {
      if (ctx.chat_template == nullptr) {
        throw_bad_request("messages", "this model has no chat template; use /v1/completions");
      }
      check_roles(messages, ctx.chat_template->source());
      prompt = ctx.chat_template->render(make_chat_context(messages, add_generation_prompt, extra));
    }
  } catch (const TemplateError& e) {
    throw_bad_request("messages", "the chat template failed: {}", e.what());
  }
  if (continue_final) {
    try {
      prompt = continue_final_message(std::move(prompt), messages);
    } catch (const Error& e) {
      throw_bad_request("continue_final_message", "{}", e.what());
    }
  }
  try {
    req.prompts.push_back(
        ctx.tokenizer->encode(prompt, f.boolean("add_special_tokens").value_or(false)));
  } catch (const Error& e) {
    throw_bad_request("messages", "the prompt cannot be tokenized: {}", e.what());
  }
  req.prompt_texts.push_back(std::move(prompt));
  constrain_after_reasoning(ctx, req);
  finish_request(ctx, max_tokens, "messages", req);
  return req;
}

}  // namespace kestrel::server
