// A chat choice's output split into thinking (with --reasoning-parser), answer text with its
// tokens' logprobs, and complete tool calls (with --tool-call-parser and tools in the
// request), in the order the model wrote them: thinking first, then calls out of the rest;
// parallel_tool_calls false keeps the first call only. The one split every endpoint uses:
// the Responses and Messages APIs take the pieces (take), the chat endpoint the same pieces
// put back into its delta's fields (take_into).
//
// One per choice, fed its deltas in order. Thread safety: none.
#pragma once

#include <nlohmann/json.hpp>
#include <functional>
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
  // attach_logprobs false: no logprob entries on the text pieces (the chat endpoint formats
  // its deltas' own logprobs, every token's).
  OutputPieces(const ServerState& state, const GenerateRequest& request,
               bool attach_logprobs = true);

  // The pieces `delta` completes (a choice's last delta: all that was held back). Empty
  // pieces are left out.
  std::vector<OutputPiece> take(const ChoiceDelta& delta);
  // The chat endpoint's form: take(delta), put back into delta's fields: the thinking into
  // reasoning, the answer text into text, the calls into tool_calls (first_tool_call: the
  // choice's calls before them; ids from call_id()); the last delta's "stop" after calls
  // becomes "tool_calls". delta.tool_calls must be empty.
  void take_into(ChoiceDelta& delta, const std::function<std::string()>& call_id);
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
  int calls_seen_ = 0;  // parsed, kept or not
  int calls_kept_ = 0;
  ResponseMeta meta_;  // its tokenizer, for the logprob entries' token strings
  nlohmann::ordered_json pending_logprobs_ = nlohmann::ordered_json::array();  // not yet given with text
};

}  // namespace kestrel::server
