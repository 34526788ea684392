// Reasoning models' thinking, separated from the answer: `--reasoning-parser qwen3` moves the
// text between <think> and </think> (Qwen3, and DeepSeek-R1's format) into vLLM's
// `reasoning_content` field, streamed as `delta.reasoning_content`, and leaves the rest in
// `content`. The tags themselves go.
//
// One splitter per choice, fed the choice's text as it comes. Text before <think> and after
// </think> is content; between them, reasoning. A tag split across two deltas is held back
// until it is whole (or the output ends). A non-streamed response runs the same splitter over
// its whole text, so it equals the concatenation of the streamed pieces. Where vLLM's Qwen3
// parser differs: an output cut inside its thinking (no </think>) is reasoning here, as the
// stream showed it, where vLLM's non-streamed answer turns it all into content.
#pragma once

#include <string>
#include <string_view>

#include "server/request_parser.h"

namespace kestrel::server {

struct ReasoningPiece {
  std::string reasoning;
  std::string content;
};

class ReasoningSplitter {
 public:
  // thinking: the prompt left a <think> open, so the output starts as reasoning.
  explicit ReasoningSplitter(bool thinking = false)
      : state_(thinking ? State::kThinking : State::kBefore) {}

  // The parts of `text` (appended to what came before) that are final now.
  ReasoningPiece feed(std::string_view text);
  // What was held back, at the end of the output.
  ReasoningPiece finish();
  // feed(text), and with `last` (the output ends with it) finish() added on.
  ReasoningPiece take(std::string_view text, bool last);

 private:
  enum class State { kBefore, kThinking, kAfter };
  State state_;
  std::string pending_;  // a possible start of the next tag
};

// The names --reasoning-parser takes.
bool known_reasoning_parser(const std::string& name);

// Whether the rendered prompt `prompt` leaves a <think> open: its last <think> comes after
// its last </think>.
bool prompt_opens_thinking(std::string_view prompt);

// With a reasoning parser: req.thinking_open from its last prompt, and its structured output
// (if any) moved after the thinking, unless ctx says to constrain the thinking too.
void constrain_after_reasoning(const ServingContext& ctx, GenerateRequest& req);

}  // namespace kestrel::server
