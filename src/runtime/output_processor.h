// OutputProcessor: the one place where a request's token ids become what its consumer sees
// (request_stream.h describes the result). Per sample it runs the incremental detokenizer,
// ends the sample at a stop string (text before it, or through it with
// include_stop_str_in_output; tokens up to the one that completed it), records the stop
// reason (the stop string, or a stop token id), keeps logprobs and each token's text offset,
// and shapes the request's outputs as params.output_kind asks.
//
// It reads the engine's outputs in engine_output_kind(): deltas while it must watch every
// step (the consumer wants progress, or stop strings need the text), otherwise the one
// final output, so that a plain batch generate() detokenizes once per sample at the end.
//
// Not thread-safe: one per request, used by the thread that steps the engine.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kestrel/request_output.h"
#include "kestrel/sampling_params.h"
#include "tokenizer/detokenizer.h"

namespace kestrel {

class OutputProcessor {
 public:
  // `tokenizer` null: token ids only. Throws kestrel::Error when stop strings come without a
  // tokenizer or one is empty or not valid UTF-8.
  OutputProcessor(const Tokenizer* tokenizer, const SamplingParams& params,
                  std::span<const int> prompt);

  // The output_kind to add the request to the engine with.
  OutputKind engine_output_kind() const { return engine_kind_; }

  struct Result {
    std::optional<RequestOutput> output;  // what the consumer gets now, if anything
    std::vector<int> stopped;             // samples a stop string ended: abort them in the engine
  };
  // Feeds one engine output of the request (in engine_output_kind()).
  Result process(RequestOutput engine_output);
  // Every sample finished (the engine may still hold samples that a stop string ended).
  bool finished() const { return num_finished_ == samples_.size(); }

 private:
  struct Sample {
    std::optional<Detokenizer> detok;  // none without a tokenizer
    CompletionOutput all;              // cumulative
    size_t num_chars = 0;              // characters of all.text
  };
  // Feeds a sample's new tokens; `delta` gets what they add. True when it finished.
  bool advance(Sample& s, const CompletionOutput& in, CompletionOutput& delta);
  void finish(Sample& s, CompletionOutput& delta, std::string reason);

  SamplingParams params_;
  OutputKind engine_kind_;
  std::vector<int> prompt_;  // for cumulative outputs (engine deltas carry it once)
  std::vector<Sample> samples_;
  size_t num_finished_ = 0;
  int num_cached_tokens_ = 0;
  bool prompt_sent_ = false;
  // The engine's prompt logprobs (they come once), for cumulative outputs; sent: in a delta.
  std::vector<TokenLogprobs> prompt_logprobs_;
  bool prompt_logprobs_sent_ = false;
};

}  // namespace kestrel
