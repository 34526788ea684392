// RequestState: what an LLM and the RequestStream it returned share about one request.
// Internal to src/runtime (llm.cc, request_stream.cc).
#pragma once

#include <deque>
#include <string>

#include "kestrel/request_output.h"
#include "runtime/output_processor.h"

namespace kestrel {

class LLM;

struct RequestState {
  RequestState(std::string request_id, LLM* owner, OutputProcessor output_processor)
      : id(std::move(request_id)), llm(owner), processor(std::move(output_processor)) {}

  const std::string id;
  LLM* llm;  // null once the LLM is destroyed
  OutputProcessor processor;
  std::deque<RequestOutput> outputs;  // produced, not yet taken
  bool finished = false;              // the final output was produced, or the request aborted
};

}  // namespace kestrel
