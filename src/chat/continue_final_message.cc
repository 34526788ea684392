// continue_final_message (chat_template.h): transformers' rule, with Python's str.strip().
#include <string>

#include "chat/chat_template.h"
#include "chat/utf8.h"
#include "core/error.h"

namespace kestrel {

std::string continue_final_message(std::string rendered, const nlohmann::ordered_json& messages) {
  KS_CHECK(messages.is_array() && !messages.empty() && messages.back().is_object(),
           "continue_final_message needs a final message to continue");
  const nlohmann::ordered_json& last = messages.back();
  auto content = last.find("content");
  std::string text;
  bool found = false;
  if (content != last.end() && content->is_string()) {
    text = content->get<std::string>();
    found = true;
  } else if (content != last.end() && content->is_array()) {
    for (auto part = content->rbegin(); part != content->rend() && !found; ++part) {
      found = part->is_object() && part->contains("text") && (*part)["text"].is_string();
      if (found) text = (*part)["text"].get<std::string>();
    }
  }
  KS_CHECK(found, "continue_final_message: the final message has no text to continue");
  const std::string stripped = chat::py_strip(text, nullptr, true, true);
  const std::string lstripped = chat::py_strip(text, nullptr, true, false);
  const size_t at = rendered.rfind(stripped);
  KS_CHECK(at != std::string::npos,
           "continue_final_message: the final message does not appear in the chat after applying "
           "the chat template (the template changes or drops part of it)");
  // Where the template kept the text as it was, trailing whitespace included, the prompt
  // keeps it too; where it trimmed it, the prompt ends at the stripped text.
  const bool kept = rendered.compare(at, lstripped.size(), text) == 0;
  rendered.resize(at + (kept ? lstripped.size() : stripped.size()));
  return rendered;
}

}  // namespace kestrel
