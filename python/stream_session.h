// StreamSession: LLM::generate_streaming, one engine step per call, so that the Python
// layer can hand out each piece of text from an iterator instead of a callback (a callback
// into Python would have to hold the GIL inside the engine loop, and a generator cannot
// yield from inside a C++ call).
//
// The pieces and the final output are those of generate_streaming for the same request:
// one RequestStream, its cumulative text handed out as it grows.
//
// Not thread-safe: one thread uses a session at a time; the engine itself is guarded by the
// handle's mutex, which step() and abort() take.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine_handle.h"
#include "kestrel/request_output.h"
#include "kestrel/request_stream.h"
#include "kestrel/sampling_params.h"

namespace kestrel::python {

class StreamSession {
 public:
  // Claims the engine and queues the request. Throws kestrel::Error, with nothing queued,
  // when the model has no tokenizer, params.n != 1, or the prompt or params are invalid.
  StreamSession(std::shared_ptr<EngineHandle> engine, const std::vector<int>& prompt,
                const SamplingParams& params);
  // Aborts the request when unfinished.
  ~StreamSession();
  StreamSession(const StreamSession&) = delete;
  StreamSession& operator=(const StreamSession&) = delete;

  // Runs one engine step; returns the text that became final in it (often "" while a
  // character or a possible stop string is incomplete). "" once done(). Throws
  // kestrel::Error when the engine fails.
  std::string step();
  bool done() const { return output_.has_value() || aborted_; }
  // The finished request (text, token ids, finish_reason); nullopt until then.
  const std::optional<RequestOutput>& output() const { return output_; }
  // Aborts the request when unfinished and gives the engine back; idempotent.
  void abort();

 private:
  std::shared_ptr<EngineHandle> engine_;
  std::optional<RequestStream> stream_;
  size_t emitted_ = 0;  // bytes of the text handed out
  std::optional<RequestOutput> output_;
  bool claimed_ = false;
  bool aborted_ = false;
};

}  // namespace kestrel::python
