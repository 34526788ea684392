#include "server/mistral_calls.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kestrel::server {
namespace {

constexpr std::string_view kTag = "[TOOL_CALLS]";
constexpr std::string_view kArgs = "[ARGS]";
constexpr std::string_view kCallId = "[CALL_ID]";

std::string_view trim(std::string_view s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string_view::npos) return {};
  return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

// v0.3: a JSON list of calls.
std::optional<std::vector<ToolCall>> parse_list(std::string_view text) {
  const nlohmann::ordered_json list = nlohmann::ordered_json::parse(text, nullptr, false);
  if (list.is_discarded() || !list.is_array() || list.empty()) return std::nullopt;
  std::vector<ToolCall> calls;
  for (const auto& item : list) {
    std::optional<ToolCall> call = tool_call_of(item);
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
  }
  return calls;
}

// v11+: one call's text after its tag, name[ARGS]{...} or name[CALL_ID]id[ARGS]{...}.
std::optional<ToolCall> parse_named(std::string_view text) {
  const size_t args = text.find(kArgs);
  if (args == std::string_view::npos) return std::nullopt;
  std::string_view name = text.substr(0, args);
  if (const size_t id = name.find(kCallId); id != std::string_view::npos) name = name.substr(0, id);
  name = trim(name);
  if (name.empty() || name.find_first_of(" \t\r\n[]{}\"") != std::string_view::npos) {
    return std::nullopt;
  }
  const nlohmann::ordered_json body =
      nlohmann::ordered_json::parse(trim(text.substr(args + kArgs.size())), nullptr, false);
  if (body.is_discarded() || !body.is_object()) return std::nullopt;
  return ToolCall{std::string(name),
                  body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)};
}

// The held answer from its first tag on (the tag taken off), or a tag-less answer that
// starts with '['.
std::optional<std::vector<ToolCall>> parse_calls(std::string_view text) {
  text = trim(text);
  if (!text.empty() && text[0] == '[' && text.substr(0, kArgs.size()) != kArgs) {
    return parse_list(text);
  }
  std::vector<ToolCall> calls;
  while (true) {
    const size_t next = text.find(kTag);
    std::optional<ToolCall> call = parse_named(text.substr(0, next));
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
    if (next == std::string_view::npos) return calls;
    text = text.substr(next + kTag.size());
  }
}

class MistralParser final : public ToolCallParser {
 public:
  ToolCallPiece feed(std::string_view text) override {
    ToolCallPiece out;
    held_.append(text);
    if (state_ == State::kCalls) return out;
    if (state_ == State::kUndecided) {
      const size_t first = held_.find_first_not_of(" \t\r\n");
      if (first == std::string::npos) return out;  // only blanks so far
      const std::string_view start = std::string_view(held_).substr(first);
      if (start.size() < kTag.size() && kTag.substr(0, start.size()) == start) return out;
      if (start[0] == '[' && start.substr(0, kTag.size()) != kTag) {
        state_ = State::kCalls;  // a JSON list: v0.3 calls whose tag was dropped, or content
        untagged_ = true;
        return out;
      }
      state_ = State::kText;
    }
    // Text: out up to the tag (or up to what may be its start), the rest held.
    const size_t tag = held_.find(kTag);
    if (tag != std::string::npos) {
      out.content = held_.substr(0, tag);
      held_.erase(0, tag);
      state_ = State::kCalls;
      return out;
    }
    size_t keep = 0;
    for (size_t n = std::min(held_.size(), kTag.size() - 1); n > 0; --n) {
      if (std::string_view(held_).substr(held_.size() - n) == kTag.substr(0, n)) {
        keep = n;
        break;
      }
    }
    out.content = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
  }

  ToolCallPiece finish() override {
    ToolCallPiece out;
    std::optional<std::vector<ToolCall>> calls;
    if (state_ == State::kCalls) {
      std::string_view text = held_;
      if (!untagged_) text.remove_prefix(kTag.size());
      calls = parse_calls(text);
    }
    if (calls) {
      out.calls = std::move(*calls);
    } else {
      out.content = std::move(held_);
    }
    held_.clear();
    state_ = State::kUndecided;
    untagged_ = false;
    return out;
  }

 private:
  enum class State { kUndecided, kText, kCalls };
  State state_ = State::kUndecided;
  bool untagged_ = false;  // kCalls from a leading '[' rather than the tag
  std::string held_;
};

}  // namespace

std::unique_ptr<ToolCallParser> make_mistral_parser() { return std::make_unique<MistralParser>(); }

std::string mistral_call_id(uint64_t salt, uint64_t n) {
  // splitmix64 of the salted count: distinct counts give distinct 64-bit values, of which
  // nine base-62 digits (53.6 bits) are kept.
  uint64_t z = salt + (n + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  static constexpr char kDigits[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  std::string id(9, '0');
  for (char& c : id) {
    c = kDigits[z % 62];
    z /= 62;
  }
  return id;
}

}  // namespace kestrel::server
