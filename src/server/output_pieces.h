// A chat choice's output as the Responses and Messages APIs give it: thinking (with
// --reasoning-parser), answer text with its tokens' logprobs, and complete tool calls (with
// --tool-call-parser and tools in the request), in the order the model wrote them. The same
// split as the chat endpoint's (generate_handler.cc): thinking first, then calls out of the
// rest; parallel_tool_calls false keeps the first call only.
//
// One per choice, fed its deltas in order. Thread safety: none.
#pragma once

#include <nlohmann/json.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/generation.h"
#include "server/openai_format.h"
#include "server/reasoning.h"
#include "server/server_state.h"
#include "server/tool_calls.h"

namespace kestrel::server {

struct OutputPiece {
  enum class Kind { kReasoning, kText, kToolCall };
  Kind kind = Kind::kText;
  std::string text;  // kReasoning, kText
  // kText: the entries of the tokens that came with it (openai_format.h
  // token_logprob_entries), when the request asked for logprobs; else empty.
  nlohmann::ordered_json logprobs = nlohmann::ordered_json::array();
  ToolCall call;  // kToolCall
};

class OutputPieces {
 public:
  OutputPieces(const ServerState& state, const GenerateRequest& request);

  // The pieces `delta` completes (a choice's last delta: all that was held back). Empty
  // pieces are left out.
  std::vector<OutputPiece> take(const ChoiceDelta& delta);
  // Of `output_tokens`, those that were thinking: the engine does not tell, so the thinking's
  // text tokenized again (a model's own text gives back its tokens, but for the tags).
  int reasoning_tokens(int output_tokens) const;

 private:
  void add_text(const std::string& text, bool split_off, std::vector<OutputPiece>& out);

  const ServerState& state_;
  const bool logprobs_, parallel_tool_calls_;
  std::optional<ReasoningSplitter> reasoning_;
  std::unique_ptr<ToolCallParser> tool_parser_;
  std::string reasoning_text_;
  int calls_seen_ = 0;
  ResponseMeta meta_;  // its tokenizer, for the logprob entries' token strings
  nlohmann::ordered_json pending_logprobs_ = nlohmann::ordered_json::array();  // not yet given with text
};

}  // namespace kestrel::server
