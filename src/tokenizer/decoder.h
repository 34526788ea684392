// The `decoder` of a tokenizer.json: ByteLevel, Replace (String or Regex pattern), ByteFallback,
// Fuse, Strip (content, start, stop) and Metaspace (replacement, prepend_scheme / legacy
// add_prefix_space), alone or in a Sequence. Other types, or a missing decoder, fail at load
// naming themselves.
//
// Semantics are HF `tokenizers`' decode_chain, step by step, then a join with "":
//   - Replace: every non-overlapping match in each token, leftmost first.
//   - ByteFallback: a run of consecutive "<0xNN>" tokens becomes one token: its bytes when
//     they are UTF-8, else one U+FFFD per byte of the run.
//   - Fuse: all tokens become one.
//   - Strip: up to `start` leading and `stop` trailing `content` characters off each token
//     (after Fuse: off the whole text; Llama 2 drops the space its Prepend normalizer added).
//   - Metaspace: the replacement character becomes ' ', except in the first token, where it
//     is dropped unless prepend_scheme is "never".
//   - ByteLevel: every token becomes the bytes its characters stand for (its own UTF-8 when a
//     character is outside the alphabet); all are joined and made UTF-8 lossily.
// Steps that act on single tokens run as tokens arrive; after the first joining step (Fuse or
// ByteLevel) the rest acts on one growing text. A step that needs the whole text at once
// there (Regex Replace, ByteFallback, ByteLevel after a join) is refused at load.
//
// Thread safety: a Decoder is immutable; a DecodeStream belongs to one thread.
#pragma once

#include <cstddef>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace kestrel {

class Decoder {
 public:
  enum class Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace };

  struct Step {
    Kind kind = Kind::kByteLevel;
    std::string pattern;                 // Replace (String pattern); Metaspace replacement
    std::shared_ptr<const Regex> regex;  // Replace (Regex pattern)
    std::string content;                 // Replace: the replacement; Strip: one character
    size_t start = 0, stop = 0;          // Strip
    bool drop_first = true;              // Metaspace: prepend_scheme != "never"
  };

  Decoder() = default;

  // Parses the "decoder" value; throws kestrel::Error naming an unsupported type.
  static Decoder from_json(const nlohmann::json& j);

  // True when the decoder is ByteLevel alone (each token maps to fixed bytes).
  bool byte_level() const;

  // The text of `tokens` (vocabulary strings and added-token contents), as HF decodes it.
  std::string decode(std::span<const std::string_view> tokens) const;

  // What `token` contributes in the middle of a text: the token-wise steps applied as to a
  // token that is not the first one ("▁Hello" -> " Hello", "<0x0A>" -> "\n"); a
  // byte-fallback token gives its raw byte. Steps after the first join are not applied.
  std::string token_bytes(std::string_view token) const;

 private:
  friend class DecodeStream;
  std::vector<Step> steps_;
  size_t join_ = 0;  // index of the first joining step (steps_.size() when none)
};

// Decodes tokens as they arrive. push() appends to `out` only text that no later token can
// change; finish() appends the rest. The concatenation equals Decoder::decode of the same
// tokens.
class DecodeStream {
 public:
  explicit DecodeStream(const Decoder& decoder);

  void push(std::string_view token, std::string& out);
  void finish(std::string& out);

  // Declares the tokens pushed so far to be context (a prompt) whose text was already shown:
  // later tokens are treated as not first (no leading-space strip), text held back is
  // dropped, and an unfinished byte-fallback character keeps only its incomplete bytes (if
  // later bytes do not complete them, they are dropped rather than shown as U+FFFD).
  void end_context();

 private:
  struct State {
    std::string buffer;    // ByteFallback: the open run; ByteLevel: undecoded bytes;
                           // Strip: held trailing characters; Replace: held text
    size_t carried = 0;    // ByteFallback: leading bytes of the run that came from context
    size_t count = 0;      // Metaspace: tokens seen; Strip: characters stripped at the start
    bool started = false;  // Strip: past the start
  };

  void token_at(size_t i, std::string token, std::string& out);
  void text_at(size_t i, std::string_view text, std::string& out);
  void flush_at(size_t i, std::string& out);
  void close_run(size_t i, std::string& out);

  const Decoder* decoder_;
  std::vector<State> state_;
  bool pushed_ = false;
};

}  // namespace kestrel
