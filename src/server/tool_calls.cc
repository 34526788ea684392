#include "server/tool_calls.h"

#include <nlohmann/json.hpp>
#include <optional>

#include "server/held_call_parser.h"
#include "server/mistral_calls.h"
#include "server/pythonic_calls.h"
#include "server/tag_scan.h"

namespace kestrel::server {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";

std::optional<ToolCall> parse_call(const std::string& body) {
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(body, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return tool_call_of(j);
}

class HermesParser final : public ToolCallParser {
 public:
  ToolCallPiece feed(std::string_view text) override;
  ToolCallPiece finish() override;

 private:
  bool in_call_ = false;
  std::string pending_;    // outside a call: a possible start of <tool_call>
  std::string call_body_;  // inside a call: its text so far
};

ToolCallPiece HermesParser::feed(std::string_view text) {
  ToolCallPiece out;
  std::string buffer = std::move(pending_);
  buffer.append(text);
  pending_.clear();
  std::string_view rest = buffer;
  while (!rest.empty()) {
    if (!in_call_) {
      const size_t at = rest.find(kOpen);
      if (at == std::string_view::npos) {
        const size_t hold = partial_tag(rest, kOpen);
        out.content.append(rest.substr(0, rest.size() - hold));
        pending_ = std::string(rest.substr(rest.size() - hold));
        break;
      }
      out.content.append(rest.substr(0, at));
      rest.remove_prefix(at + kOpen.size());
      in_call_ = true;
      call_body_.clear();
      continue;
    }
    call_body_.append(rest);
    const size_t at = call_body_.find(kClose);
    if (at == std::string::npos) break;
    const std::string after = call_body_.substr(at + kClose.size());
    call_body_.resize(at);
    if (std::optional<ToolCall> call = parse_call(call_body_)) {
      out.calls.push_back(std::move(*call));
    } else {
      out.content.append(kOpen).append(call_body_).append(kClose);  // not a call after all
    }
    in_call_ = false;
    call_body_.clear();
    // Continue with what followed the closing tag (a copy: `rest` may view call_body_).
    pending_.clear();
    ToolCallPiece tail = feed(after);
    out.content += tail.content;
    for (ToolCall& c : tail.calls) out.calls.push_back(std::move(c));
    return out;
  }
  return out;
}

ToolCallPiece HermesParser::finish() {
  ToolCallPiece out;
  if (in_call_) {
    out.content.append(kOpen).append(call_body_);  // never closed: text
  } else {
    out.content = std::move(pending_);
  }
  pending_.clear();
  call_body_.clear();
  in_call_ = false;
  return out;
}

class Llama3JsonParser final : public HeldCallParser {
 public:
  Llama3JsonParser() : HeldCallParser('{', "<|python_tag|>") {}

 private:
  // Objects one after another, separated by blanks and ";".
  std::optional<std::vector<ToolCall>> parse(std::string_view text) const override {
    std::vector<ToolCall> calls;
    for (;;) {
      const size_t at = text.find_first_not_of(" \t\r\n;");
      if (at == std::string_view::npos) break;
      text.remove_prefix(at);
      const size_t end = json_object_end(text);
      std::optional<ToolCall> call;
      if (end != 0) call = parse_call(std::string(text.substr(0, end)));
      if (!call) return std::nullopt;
      calls.push_back(std::move(*call));
      text.remove_prefix(end);
    }
    return calls;
  }

  // Length of the JSON object `text` starts with (matching braces outside strings), or 0.
  static size_t json_object_end(std::string_view text) {
    if (text.empty() || text[0] != '{') return 0;
    int depth = 0;
    bool in_string = false, escaped = false;
    for (size_t i = 0; i < text.size(); ++i) {
      const char c = text[i];
      if (in_string) {
        if (escaped) escaped = false;
        else if (c == '\\') escaped = true;
        else if (c == '"') in_string = false;
      } else if (c == '"') {
        in_string = true;
      } else if (c == '{') {
        ++depth;
      } else if (c == '}' && --depth == 0) {
        return i + 1;
      }
    }
    return 0;
  }
};

}  // namespace

std::optional<ToolCall> tool_call_of(const nlohmann::ordered_json& j) {
  if (!j.is_object()) return std::nullopt;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string()) return std::nullopt;
  ToolCall call;
  call.name = name->get<std::string>();
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");  // some models' spelling
  if (args == j.end() || args->is_null()) {
    call.arguments = "{}";
  } else if (args->is_string()) {
    call.arguments = args->get<std::string>();  // already JSON text
  } else {
    call.arguments = args->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return call;
}

ToolCallPiece ToolCallParser::take(std::string_view text, bool last) {
  ToolCallPiece piece = feed(text);
  if (last) {
    ToolCallPiece rest = finish();
    piece.content += rest.content;
    for (ToolCall& c : rest.calls) piece.calls.push_back(std::move(c));
  }
  return piece;
}

std::unique_ptr<ToolCallParser> make_tool_call_parser(const std::string& name) {
  if (name == "llama3_json") return std::make_unique<Llama3JsonParser>();
  if (name == "pythonic") return make_pythonic_parser();
  if (name == "mistral") return make_mistral_parser();
  return std::make_unique<HermesParser>();
}

std::optional<structured::ToolCallMarkup> tool_call_markup(const std::string& name) {
  if (name == "pythonic") return std::nullopt;
  if (name == "llama3_json") return structured::ToolCallMarkup{"", "", "; ", "parameters", "", ""};
  if (name == "mistral") {
    return structured::ToolCallMarkup{"", "", ", ", "arguments", "[TOOL_CALLS][", "]"};
  }
  // Calls back to back: a separator would be left over as the message's content.
  return structured::ToolCallMarkup{"<tool_call>\n", "\n</tool_call>", "", "arguments", "", ""};
}

bool known_tool_call_parser(const std::string& name) {
  return name == "hermes" || name == "llama3_json" || name == "pythonic" || name == "mistral";
}

}  // namespace kestrel::server
