// Chat templates: the Jinja2 programs in a model's tokenizer_config.json ("chat_template") that
// turn chat messages into a prompt. Rendering is exact to Python's jinja2 as Hugging Face
// transformers runs it (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
// loopcontrols, HF's `tojson`, `raise_exception` and `strftime_now`). docs/chat_templates.md
// lists the supported subset.
//
// Errors: a syntax error (parse) or a failure while rendering (type error, undefined value
// used as a real one, the template's own raise_exception) throws kestrel::TemplateError, a
// kestrel::Error naming the template line and column.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "chat/template_error.h"

namespace kestrel {

class ChatTemplate {
 public:
  // Parses `source`; throws TemplateError on a syntax error.
  static ChatTemplate parse(std::string source);

  // Renders with the template variables in `context` (a JSON object, e.g. messages, tools,
  // add_generation_prompt, bos_token). Object keys keep their order, as Python dicts do.
  // Thread-safe: a parsed template may be rendered from many threads at once.
  std::string render(const nlohmann::ordered_json& context) const;

  const std::string& source() const;

 private:
  struct Impl;
  explicit ChatTemplate(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// The variables transformers' apply_chat_template passes to the template: `messages`,
// `tools` and `documents` (null unless given in `extra`), `add_generation_prompt`, then every
// other key of `extra` (bos_token, eos_token, enable_thinking, date_string, ...).
// REQUIRES: messages is an array, extra an object (else throws kestrel::Error).
nlohmann::ordered_json make_chat_context(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                         const nlohmann::ordered_json& extra);

// Parses `tmpl` and renders it with make_chat_context(...). Parse once with ChatTemplate when
// rendering the same template many times.
std::string apply_chat_template(const std::string& tmpl, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt,
                                const nlohmann::ordered_json& extra = nlohmann::ordered_json::object());

// The Jinja source a --chat-template argument names: the file's contents where `arg` is a
// path to a regular file, else `arg` itself when it looks like a template ("{{" or "{%").
// Throws kestrel::Error otherwise, or when the file cannot be read.
std::string chat_template_source(const std::string& arg);

// transformers' continue_final_message: `rendered` (messages rendered without a generation
// prompt) cut right after the final message's text, so that the model goes on with it
// instead of starting a new turn. The text is the last message's string content, or the
// last text part of a list. Cut after its last occurrence: with its trailing whitespace
// where the template kept the text whole (and it has no leading whitespace), else after
// the text stripped as Python's str.strip() does. Throws kestrel::Error when the last
// message has no text or the rendered chat does not contain it.
std::string continue_final_message(std::string rendered, const nlohmann::ordered_json& messages);

// Checks the shape an API caller's messages must have (the HTTP server checks its own):
// an array of objects, each with a string "role" and a "content" that is a string, a list
// of parts or null when present. Throws kestrel::Error naming the first message that is not.
void check_chat_messages(const nlohmann::ordered_json& messages);

// Replaces message content given as a list of parts ([{"type": "text", "text": "..."}, ...])
// by the texts joined with "\n", as vLLM does for templates that expect string content.
// Throws kestrel::Error for a part that is not text.
nlohmann::ordered_json flatten_text_content(const nlohmann::ordered_json& messages);

}  // namespace kestrel
