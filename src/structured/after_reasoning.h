// Structured outputs of a reasoning model constrain its answer, not its thinking: with a
// reasoning parser, vLLM applies a request's grammar only once the thinking has ended, and so
// does this wrapper. A model such as Qwen3 writes `<think>` ... `</think>` and then its
// answer; held to a JSON schema from its first token, it could not think at all.
//
// The wrapper runs in three states:
// - start (the prompt leaves no <think> open): the answer's first tokens, or the open tag,
//   which moves to thinking;
// - thinking (after the open tag, or from the start where the prompt opened it): every token
//   is allowed, and the close tag moves to the answer;
// - answer: the wrapped constraint, from its own start.
// The tags are single tokens (Qwen3's and DeepSeek-R1's are), recognised by id.
#pragma once

#include <memory>

#include "kestrel/token_constraint.h"

namespace kestrel::structured {

struct ThinkTags {
  int open = -1;   // <think>
  int close = -1;  // </think>
};

// `answer` applied after the thinking. REQUIRES: both tags in [0, vocab_size).
std::shared_ptr<const TokenConstraintFactory> after_reasoning(
    std::shared_ptr<const TokenConstraintFactory> answer, ThinkTags tags, int vocab_size,
    bool prompt_opens_thinking);

}  // namespace kestrel::structured
