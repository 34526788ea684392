// SamplingParams: how one request's tokens are chosen and when it stops.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kestrel {

class TokenConstraintFactory;  // kestrel/token_constraint.h

// What a request's stream (request_stream.h) gets and when (vLLM's RequestOutputKind).
enum class OutputKind {
  kCumulative,  // each step that adds tokens: everything so far
  kDelta,       // each step that adds tokens: only what it added (the prompt in the first)
  kFinalOnly,   // once, when the request finishes: everything
};

struct SamplingParams {
  // 0 means greedy (argmax). Must be >= 0.
  float temperature = 1.0f;
  // Keep the k most likely tokens; 0 or -1 disables. Must be -1 or >= 0.
  int top_k = -1;
  // Keep the smallest set of tokens whose probability sums to >= top_p. In (0, 1].
  float top_p = 1.0f;
  // Drop tokens with probability < min_p * max probability. In [0, 1].
  float min_p = 0.0f;
  // Makes sampling reproducible for this request whatever else is in the batch.
  // Without a seed the engine draws one per request.
  std::optional<uint64_t> seed;
  // Most tokens to generate. >= 1. nullopt: up to the model's context length.
  std::optional<int> max_tokens = 16;
  // EOS and stop ids are ignored until this many tokens were generated. >= 0, <= max_tokens.
  int min_tokens = 0;
  bool ignore_eos = false;
  // Extra token ids that end the request (the matched id is kept in the output).
  std::vector<int> stop_token_ids;
  // Text that ends a sample when its output reaches it (needs a tokenizer).
  // The text ends right before the match (after it with include_stop_str_in_output) and the
  // tokens after the one that completed it are dropped. Each non-empty, valid UTF-8.
  std::vector<std::string> stop;
  bool include_stop_str_in_output = false;
  // Turn tokens into text (CompletionOutput::text). false: token ids only (benchmarks).
  bool detokenize = true;
  // Leave special tokens (<|im_end|>, ...) out of the text.
  bool skip_special_tokens = true;
  // HF semantics: logits of tokens seen in prompt or output divided (if > 0) or multiplied
  // (if < 0) by this. > 0; 1 disables.
  float repetition_penalty = 1.0f;
  // OpenAI semantics over generated tokens only. In [-2, 2].
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // OpenAI's logit_bias: each (token id, bias) adds bias to that token's logit before the
  // penalties (after min_tokens, as vLLM; logprobs stay those of the raw logits). Ids in the
  // vocabulary, each at most once; biases finite, in [-kMaxBias, kMaxBias]; at most
  // kMaxLogitBias.
  std::vector<std::pair<int, float>> logit_bias;
  static constexpr size_t kMaxLogitBias = 1024;
  static constexpr float kMaxBias = 100.0f;
  // Independent samples for the prompt; they share the prompt's KV blocks. >= 1.
  int n = 1;
  // Return the log-probabilities of this many most likely tokens (plus the sampled one)
  // for each generated token. nullopt: none. 0..20.
  std::optional<int> logprobs;
  static constexpr int kMaxLogprobs = 20;  // the most `logprobs` may ask for
  // vLLM's prompt_logprobs: for each prompt token after the first, its log-probability given
  // the tokens before it, its rank and this many most likely tokens in its place
  // (RequestOutput::prompt_logprobs). nullopt: none. 0..20. The prompt is computed whole for
  // it (no prefix-cache hits for the request's first sample).
  std::optional<int> prompt_logprobs;
  // Structured outputs: each sample's tokens are constrained to what the factory's
  // constraints allow (kestrel/token_constraint.h; the server builds them from
  // response_format and guided_*). Shared by the samples; not with min_tokens > 0.
  std::shared_ptr<const TokenConstraintFactory> constraint;
  // How a request's stream reports progress; LLM::generate and generate_streaming choose
  // their own.
  OutputKind output_kind = OutputKind::kCumulative;

  bool greedy() const { return temperature == 0.0f; }
  // Throws kestrel::Error naming the first parameter out of range.
  void validate(int vocab_size) const;
  // Whether sampling changes logits before temperature: the penalties, or a logit bias.
  bool has_logit_processors() const { return has_penalties() || !logit_bias.empty(); }
  // Whether sampling reads the tokens generated so far (repetition, presence, frequency).
  bool has_penalties() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }
};

}  // namespace kestrel
