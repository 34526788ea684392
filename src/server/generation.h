// Generation: what one HTTP request generates, driven from its handler thread.
//
// A request has P prompts (completions may send several) and n samples each; choice
// i * n + j is sample j of prompt i (OpenAI's order). Each prompt is one engine request
// on the EngineLoop, whose updates already carry each sample's text, cut at a stop string
// (the LLM's output processor, request_stream.h). The request is done when every choice is.
//
// Thread safety: one thread (the handler's) uses a Generation. Destroying it before it is
// done aborts the engine requests left (a client that went away).
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/engine_loop.h"
#include "server/request_parser.h"
#include "server/tool_calls.h"

namespace kestrel::server {

// What one choice got since the last poll.
struct ChoiceDelta {
  int index = 0;
  std::string text;
  // With a reasoning parser (reasoning.h): the thinking, taken out of `text`.
  std::string reasoning;
  // With a tool-call parser (tool_calls.h): the calls completed in this delta, taken out of
  // `text`; the first is the choice's call number first_tool_call (0, 1, ...).
  std::vector<ToolCall> tool_calls;
  std::vector<std::string> tool_call_ids;  // one per call: "chatcmpl-tool-..."
  int first_tool_call = 0;
  std::vector<int> token_ids;
  std::vector<TokenLogprobs> logprobs;  // per token in token_ids, when asked for
  // Per token: where its text starts in the choice's whole text, in characters.
  std::vector<size_t> text_offsets;
  std::string finish_reason;  // "stop", "length", "abort" or "error" in the last delta
  // vLLM's stop_reason: the stop string matched, the stop token id, or null (EOS, length).
  nlohmann::json stop_reason;
};

class Generation {
 public:
  // REQUIRES: `req` came from the parsers.
  Generation(EngineLoop& loop, std::string request_id, GenerateRequest req,
             Clock::time_point arrival);
  ~Generation();
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // Queues the engine requests.
  void start();
  // Waits up to `timeout` for tokens; returns the choices that changed.
  std::vector<ChoiceDelta> poll(std::chrono::milliseconds timeout);
  bool done() const { return num_done_ == choices_.size(); }
  // Set when the engine refused or failed a request (its choices finish with "error").
  const std::string& error() const { return error_; }

  const GenerateRequest& request() const { return req_; }
  const std::string& id() const { return id_; }
  int num_choices() const { return static_cast<int>(choices_.size()); }
  // Prompt p's RequestOutput::prompt_logprobs, once the engine computed them (with
  // params.prompt_logprobs); empty before, and when not asked for.
  const std::vector<TokenLogprobs>& prompt_logprobs(int prompt) const {
    return prompt_logprobs_[prompt];
  }
  int prompt_tokens() const;      // over the prompts, counted once each (not per sample)
  int completion_tokens() const;  // over the choices, up to each one's end
  // Prompt tokens served from the prefix cache, over the prompts, counted once each: each
  // prompt's RequestOutput::num_cached_tokens as its first output reported it (so the count
  // never changes once known: a later preemption recomputes, but the usage stays). 0 for a
  // prompt that has had no output yet.
  int cached_tokens() const;

 private:
  struct Choice {
    int num_tokens = 0;
    bool done = false;
  };
  std::string engine_id(int prompt) const;
  void apply(RequestUpdate& update, std::vector<ChoiceDelta>& deltas);
  void apply_sample(int prompt, const CompletionOutput& s, ChoiceDelta& delta);
  void finish(Choice& c, ChoiceDelta& delta, std::string reason);

  EngineLoop& loop_;
  const std::string id_;
  GenerateRequest req_;
  const Clock::time_point arrival_;
  std::shared_ptr<UpdateQueue> queue_ = std::make_shared<UpdateQueue>();
  std::vector<Choice> choices_;
  std::vector<int> prompt_done_;  // finished samples per prompt
  std::vector<std::vector<TokenLogprobs>> prompt_logprobs_;  // per prompt
  std::vector<int> cached_tokens_;  // per prompt; -1 until its first output
  size_t num_done_ = 0;
  bool started_ = false;
  std::string error_;
};

}  // namespace kestrel::server
