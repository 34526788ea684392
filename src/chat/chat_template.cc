#include "chat/chat_template.h"

#include "chat/ast.h"
#include "chat/parser.h"
#include "chat/renderer.h"
#include "chat/scope_analysis.h"

namespace kestrel {

struct ChatTemplate::Impl {
  std::string source;
  chat::StmtList root;
  std::unique_ptr<chat::Scope> root_scope;
};

ChatTemplate ChatTemplate::parse(std::string source) {
  auto impl = std::make_shared<Impl>();
  impl->root = chat::parse_template(source);
  impl->root_scope = chat::analyze_scopes(impl->root);
  impl->source = std::move(source);
  return ChatTemplate(std::move(impl));
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  KS_CHECK(context.is_object(), "chat template context must be a JSON object, got {}", context.type_name());
  chat::Value variables = chat::Value::from_json(context);
  return chat::Renderer(impl_->root, *impl_->root_scope, variables).render();
}

const std::string& ChatTemplate::source() const { return impl_->source; }

nlohmann::ordered_json make_chat_context(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                         const nlohmann::ordered_json& extra) {
  KS_CHECK(messages.is_array(), "chat messages must be a JSON array, got {}", messages.type_name());
  KS_CHECK(extra.is_object(), "chat template arguments must be a JSON object, got {}", extra.type_name());
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["messages"] = messages;
  context["tools"] = extra.contains("tools") ? extra["tools"] : nlohmann::ordered_json(nullptr);
  context["documents"] = extra.contains("documents") ? extra["documents"] : nlohmann::ordered_json(nullptr);
  context["add_generation_prompt"] = add_generation_prompt;
  for (const auto& [key, value] : extra.items()) {
    if (key != "tools" && key != "documents") context[key] = value;
  }
  return context;
}

std::string apply_chat_template(const std::string& tmpl, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt, const nlohmann::ordered_json& extra) {
  return ChatTemplate::parse(tmpl).render(make_chat_context(messages, add_generation_prompt, extra));
}

void check_chat_messages(const nlohmann::ordered_json& messages) {
  KS_CHECK(messages.is_array(), "chat messages must be a JSON array, got {}", messages.type_name());
  for (size_t i = 0; i < messages.size(); ++i) {
    const nlohmann::ordered_json& m = messages[i];
    KS_CHECK(m.is_object(), "chat message {} must be an object with 'role' and 'content', got {}", i,
             m.type_name());
    auto role = m.find("role");
    KS_CHECK(role != m.end() && role->is_string(), "chat message {} needs a string 'role'", i);
    auto content = m.find("content");
    KS_CHECK(content == m.end() || content->is_string() || content->is_array() || content->is_null(),
             "chat message {}: 'content' must be a string or a list of content parts, got {}", i,
             content->type_name());
  }
}

nlohmann::ordered_json flatten_text_content(const nlohmann::ordered_json& messages) {
  KS_CHECK(messages.is_array(), "chat messages must be a JSON array, got {}", messages.type_name());
  nlohmann::ordered_json out = messages;
  for (auto& message : out) {
    if (!message.is_object() || !message.contains("content") || !message["content"].is_array()) continue;
    std::string text;
    bool first = true;
    for (const auto& part : message["content"]) {
      KS_CHECK(part.is_object() && part.contains("type") && part["type"] == "text" && part.contains("text") && part["text"].is_string(),
               "message content part {} is not a text part", part.dump());
      if (!first) text += "\n";
      first = false;
      text += part["text"].get<std::string>();
    }
    message["content"] = text;
  }
  return out;
}

}  // namespace kestrel
