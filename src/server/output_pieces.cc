#include "server/output_pieces.h"

#include <algorithm>

namespace kestrel::server {

using ojson = nlohmann::ordered_json;

OutputPieces::OutputPieces(const ServerState& state, const GenerateRequest& request,
                           bool attach_logprobs)
    : state_(state),
      logprobs_(attach_logprobs && request.logprobs),
      parallel_tool_calls_(request.parallel_tool_calls) {
  if (logprobs_) meta_.tokenizer = state.ctx.tokenizer;
  if (!state.config.reasoning_parser.empty()) reasoning_.emplace(request.thinking_open);
  if (request.tools && !state.config.tool_call_parser.empty()) {
    tool_parser_ = make_tool_call_parser(state.config.tool_call_parser);
  }
}

std::vector<OutputPiece> OutputPieces::take(const ChoiceDelta& delta) {
  const bool last = !delta.finish_reason.empty();
  if (logprobs_) {
    const nlohmann::json entries = token_logprob_entries(meta_, delta.logprobs);
    for (const auto& e : entries) pending_logprobs_.push_back(ojson(e));
  }
  std::vector<OutputPiece> out;
  ReasoningPiece piece{std::string(), delta.text};
  if (reasoning_) {
    piece = reasoning_->take(delta.text, last);
    reasoning_text_ += piece.reasoning;
    if (!piece.reasoning.empty()) {
      OutputPiece p;
      p.kind = OutputPiece::Kind::kReasoning;
      p.text = piece.reasoning;
      out.push_back(std::move(p));
    }
  }
  if (!tool_parser_) {
    add_text(piece.content, !piece.reasoning.empty(), out);
    return out;
  }
  ToolCallPiece calls = tool_parser_->take(piece.content, last);
  add_text(calls.content, !piece.reasoning.empty() || !calls.calls.empty(), out);
  for (ToolCall& call : calls.calls) {
    if (parallel_tool_calls_ || calls_seen_ == 0) {
      OutputPiece p;
      p.kind = OutputPiece::Kind::kToolCall;
      p.call = std::move(call);
      out.push_back(std::move(p));
    }
    ++calls_seen_;
  }
  return out;
}

void OutputPieces::take_into(ChoiceDelta& delta, const std::function<std::string()>& call_id) {
  std::vector<OutputPiece> pieces = take(delta);
  delta.text.clear();
  delta.reasoning.clear();
  delta.first_tool_call = calls_kept_;
  for (OutputPiece& p : pieces) {
    switch (p.kind) {
      case OutputPiece::Kind::kReasoning: delta.reasoning += p.text; break;
      case OutputPiece::Kind::kText: delta.text += p.text; break;
      case OutputPiece::Kind::kToolCall:
        delta.tool_calls.push_back(std::move(p.call));
        delta.tool_call_ids.push_back(call_id());
        break;
    }
  }
  calls_kept_ += static_cast<int>(delta.tool_calls.size());
  if (calls_kept_ > 0 && delta.finish_reason == "stop") delta.finish_reason = "tool_calls";
}

// Tokens the parsers took as thinking or calls (a delta with no answer text besides them)
// are not the answer's: their logprobs are dropped. (Where a delta's tokens were split
// between thinking and answer, all of them go with the answer's text.)
void OutputPieces::add_text(const std::string& text, bool split_off, std::vector<OutputPiece>& out) {
  if (text.empty()) {
    if (split_off) pending_logprobs_ = ojson::array();
    return;
  }
  OutputPiece p;
  p.text = text;
  p.logprobs = std::move(pending_logprobs_);
  out.push_back(std::move(p));
  pending_logprobs_ = ojson::array();
}

int OutputPieces::reasoning_tokens(int output_tokens) const {
  if (reasoning_text_.empty() || state_.ctx.tokenizer == nullptr) return 0;
  const int n = static_cast<int>(state_.ctx.tokenizer->encode(reasoning_text_, false).size());
  return std::min(n, output_tokens);
}

}  // namespace kestrel::server
