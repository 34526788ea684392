#include "server/tool_calls.h"

#include <nlohmann/json.hpp>
#include <optional>

#include "server/tag_scan.h"

namespace kestrel::server {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";

std::optional<ToolCall> parse_call(const std::string& body) {
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
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

}  // namespace

ToolCallPiece ToolCallParser::feed(std::string_view text) {
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

ToolCallPiece ToolCallParser::finish() {
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

bool known_tool_call_parser(const std::string& name) { return name == "hermes"; }

}  // namespace kestrel::server
