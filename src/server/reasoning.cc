#include "server/reasoning.h"

#include "server/tag_scan.h"

namespace kestrel::server {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

}  // namespace

ReasoningPiece ReasoningSplitter::feed(std::string_view text) {
  ReasoningPiece out;
  std::string buffer = std::move(pending_);
  buffer.append(text);
  pending_.clear();
  std::string_view rest = buffer;
  while (!rest.empty()) {
    if (state_ == State::kAfter) {
      out.content.append(rest);
      break;
    }
    const std::string_view tag = state_ == State::kBefore ? kOpen : kClose;
    std::string& into = state_ == State::kBefore ? out.content : out.reasoning;
    const size_t at = rest.find(tag);
    if (at == std::string_view::npos) {
      const size_t hold = partial_tag(rest, tag);
      into.append(rest.substr(0, rest.size() - hold));
      pending_ = std::string(rest.substr(rest.size() - hold));
      break;
    }
    into.append(rest.substr(0, at));
    rest.remove_prefix(at + tag.size());
    state_ = state_ == State::kBefore ? State::kThinking : State::kAfter;
  }
  return out;
}

ReasoningPiece ReasoningSplitter::take(std::string_view text, bool last) {
  ReasoningPiece piece = feed(text);
  if (last) {
    ReasoningPiece rest = finish();
    piece.reasoning += rest.reasoning;
    piece.content += rest.content;
  }
  return piece;
}

ReasoningPiece ReasoningSplitter::finish() {
  ReasoningPiece out;
  (state_ == State::kThinking ? out.reasoning : out.content) = std::move(pending_);
  pending_.clear();
  return out;
}

bool known_reasoning_parser(const std::string& name) { return name == "qwen3"; }

bool prompt_opens_thinking(std::string_view prompt) {
  const size_t open = prompt.rfind(kOpen);
  const size_t close = prompt.rfind(kClose);
  return open != std::string_view::npos && (close == std::string_view::npos || open > close);
}

void constrain_after_reasoning(const ServingContext& ctx, GenerateRequest& req) {
  if (!ctx.reasoning || req.prompt_texts.empty()) return;
  req.thinking_open = prompt_opens_thinking(req.prompt_texts.back());
  if (req.params.constraint == nullptr || ctx.structured_outputs_in_reasoning ||
      ctx.think_tags.open < 0) {
    return;
  }
  req.params.constraint = structured::after_reasoning(
      std::move(req.params.constraint), ctx.think_tags, ctx.vocab_size, req.thinking_open);
}

}  // namespace kestrel::server
