// Resource limits for one render of a chat template.
//
// Templates are untrusted input: the OpenAI server takes a per-request `chat_template` (and
// chat_template_kwargs), so a template must not be able to crash the process (unbounded
// recursion overflows the C++ stack), take the host's memory (`'x' * 2**62`) or a core for
// minutes (nested loops). Python's jinja2 gets some of this from Python itself (RecursionError
// at ~1000 frames, MemoryError) and its sandbox caps range() at MAX_RANGE = 100000; we add
// the caps below. Breaking one is a render error (EvalError -> TemplateError), which the
// server answers with a 400 naming the chat template.
//
// Every real chat template (Qwen, Llama, Mistral, DeepSeek, ... in tests/data) stays far
// below these: they loop over messages, tools and content parts, and nest macros a few levels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "chat/value_ops.h"

namespace kestrel::chat {

// Macro (and call-block `caller`) calls nested deeper than this fail with Python's
// "maximum recursion depth exceeded". Python allows ~1000 interpreter frames, and a jinja2
// macro call costs several of them, so legitimate templates recurse far less than this.
inline constexpr int kMaxCallDepth = 256;

// How deep a template's source may nest: expressions inside brackets or `not`/unary
// operators, and blocks inside blocks (the parser recurses once per level), and the depth of
// an expression's tree (operator chains such as `a + a + ...` or `x.a.b...` deepen it without
// recursing; evaluating and freeing it recurse). Python's jinja2 gives up near 1000 frames
// too; real templates nest a few levels.
inline constexpr int kMaxNesting = 200;
inline constexpr int kMaxExprDepth = 1000;

// The largest string one operation may build (repetition, + and ~, join, padding, indent)
// and the largest rendered output: a prompt is at most a few MB of text (a 1M-token context).
inline constexpr size_t kMaxStringBytes = size_t{32} << 20;  // 32 MiB

// The most items a list/tuple repetition or concatenation may produce.
inline constexpr size_t kMaxSequenceItems = size_t{1} << 20;

// range() length: jinja2's sandbox MAX_RANGE.
inline constexpr int64_t kMaxRange = 100000;

// Work budget of one render: loop iterations plus macro calls. Real templates do a few per
// message (a long conversation: thousands, a context full of tiny messages: ~100k); this
// stops nested loops (range(1e5) x range(1e5)) after about a second instead of running for
// minutes (an iteration costs ~1 us once its scope is freed at its end).
inline constexpr int64_t kMaxRenderSteps = 500'000;

// Throws EvalError when a string of `bytes` bytes would be over kMaxStringBytes.
inline void check_string_size(size_t bytes) {
  if (bytes > kMaxStringBytes) {
    eval_fail("string too long: {} bytes is over the chat template limit of {} bytes", bytes,
              kMaxStringBytes);
  }
}

// `a + b` bytes, with overflow counted as too long.
inline void check_string_size(size_t a, size_t b) {
  check_string_size(a > kMaxStringBytes || b > kMaxStringBytes ? kMaxStringBytes + 1 : a + b);
}

inline void check_sequence_size(size_t items) {
  if (items > kMaxSequenceItems) {
    eval_fail("sequence too long: {} items is over the chat template limit of {} items", items,
              kMaxSequenceItems);
  }
}

}  // namespace kestrel::chat
