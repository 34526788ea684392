// Sequence: one stream of tokens being generated (one of a request's n samples).
//
// Pure bookkeeping: token ids, how many of them have KV in the cache, the block table
// and the sampling parameters. No tensors, no CUDA.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kestrel/request_output.h"
#include "kestrel/sampling_params.h"
#include "kestrel/token_constraint.h"

namespace kestrel {

enum class SequenceStatus : uint8_t { kWaiting, kRunning, kFinished };

class Sequence {
 public:
  Sequence(int64_t seq_id, std::string request_id, int sample_index, std::vector<int> prompt,
           std::shared_ptr<const SamplingParams> params, uint64_t seed)
      : seq_id(seq_id),
        request_id(std::move(request_id)),
        sample_index(sample_index),
        token_ids(std::move(prompt)),
        num_prompt_tokens(static_cast<int>(token_ids.size())),
        params(std::move(params)),
        seed(seed) {}

  int num_tokens() const { return static_cast<int>(token_ids.size()); }
  int num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  std::span<const int> prompt_token_ids() const { return {token_ids.data(), size_t(num_prompt_tokens)}; }
  std::span<const int> output_token_ids() const {
    return {token_ids.data() + num_prompt_tokens, size_t(num_output_tokens())};
  }
  // Tokens whose KV still has to be computed before the next token can be sampled.
  int num_uncomputed_tokens() const { return num_tokens() - num_computed_tokens; }
  // Without the pending tokens (the engine's overlap, llm_engine.h): what has been sampled
  // and returned, and so what outputs and stop checks see.
  int num_settled_tokens() const { return num_tokens() - num_pending_tokens; }
  std::span<const int> settled_output_token_ids() const {
    return {token_ids.data() + num_prompt_tokens, size_t(num_settled_tokens() - num_prompt_tokens)};
  }
  bool is_finished() const { return status == SequenceStatus::kFinished; }
  // The request asked for prompt logprobs and this is the sample that computes its prompt
  // (the others share it). Its prompt gets no prefix-cache hits: a cached position has no
  // logits.
  bool computes_prompt_logprobs() const { return params->prompt_logprobs && sample_index == 0; }
  bool prompt_logprobs_done() const {
    return static_cast<int>(prompt_logprobs.size()) >= num_prompt_tokens - 1;
  }

  const int64_t seq_id;          // unique per engine, increasing in arrival order
  const std::string request_id;
  const int sample_index;        // 0..n-1 within its request
  // Prompt followed by generated tokens. The last num_pending_tokens of them are placeholders
  // (pending_token(row), model_executor.h) for tokens steps in flight are sampling.
  std::vector<int> token_ids;
  int num_pending_tokens = 0;
  const int num_prompt_tokens;
  // Tokens [0, num_computed_tokens) have their K/V in the cache (computed or prefix hits).
  int num_computed_tokens = 0;
  // Prompt tokens found in the prefix cache when the sequence was last admitted.
  int num_cached_tokens = 0;
  // Physical KV block of each logical block.
  std::vector<int> block_table;
  SequenceStatus status = SequenceStatus::kWaiting;
  std::shared_ptr<const SamplingParams> params;
  // Seed of this sample's random stream; a token's draw depends only on (seed, position).
  const uint64_t seed;
  std::string finish_reason;           // set when finished
  std::vector<TokenLogprobs> logprobs; // per generated token, when params->logprobs is set
  // When computes_prompt_logprobs(): entry i for prompt token i + 1, filled by the executor as
  // the steps that compute positions 0 .. num_prompt_tokens - 2 run (model_executor.h).
  std::vector<TokenLogprobs> prompt_logprobs;
  // From params->constraint (structured outputs): told each token as it settles.
  std::unique_ptr<TokenConstraint> constraint;
  int num_preemptions = 0;
};

}  // namespace kestrel
