// RequestStream: one request added to an LLM (LLM::add_request), its outputs as they come.
//
//   kestrel::RequestStream stream = llm.add_request(prompt_ids, params);  // kDelta params
//   while (auto out = stream.next()) std::cout << out->outputs[0].text;
//
// Every output passes through one output processor: incremental detokenization, stop
// strings (a sample whose text reaches one ends there, its tokens cut after the one that
// completed it), stop reasons, logprobs and text offsets. The shape follows the request's
// params.output_kind: kDelta, what each step added (the prompt ids in the first output
// only, the samples that changed); kCumulative, everything so far (every sample); kFinalOnly,
// one output when every sample finished. Text is the same whichever kind is asked and
// whoever asks (LLM::generate, generate_streaming, the server): the concatenated deltas are
// the cumulative text.
//
// Not thread-safe: use a stream from the thread that uses its LLM. A stream destroyed
// before its request finished aborts it. It may outlive its LLM (it then only hands out what
// was already produced). REQUIRES for every method but destruction and assignment: the
// stream was not moved from.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kestrel/request_output.h"

namespace kestrel {

class LLM;
struct RequestState;  // runtime/request_state.h

class RequestStream {
 public:
  RequestStream(RequestStream&&) noexcept;
  RequestStream& operator=(RequestStream&&) noexcept;
  ~RequestStream();

  const std::string& request_id() const;
  // The outputs produced since the last take() or next(), oldest first. Never steps the LLM.
  std::vector<RequestOutput> take();
  // The next output: one already produced, or the LLM's steps run (every request advances)
  // until this request has one. nullopt once the final output was handed out, after abort(),
  // or when the LLM is gone. Throws kestrel::Error when a step fails.
  std::optional<RequestOutput> next();
  // Whether the final output has been produced (it may not have been taken yet).
  bool finished() const;
  // Ends the request at once: every unfinished sample stops and its KV blocks are freed.
  // No output follows (what was produced before can still be taken). Idempotent.
  void abort();

 private:
  friend class LLM;
  explicit RequestStream(std::shared_ptr<RequestState> state);
  std::shared_ptr<RequestState> state_;
};

}  // namespace kestrel
