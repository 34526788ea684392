// The `normalizer` of a tokenizer.json: null, a Sequence of steps, or one step. Steps: the
// Unicode normalization forms NFC, NFD, NFKC, NFKD (utf8proc), Prepend, Replace (String or
// Regex pattern), Strip (left / right, Unicode White_Space) and Lowercase. Other types fail
// at load naming themselves. Each step behaves as HF `tokenizers`' normalizer of that name:
// Prepend leaves empty text empty; Replace replaces every non-overlapping match, leftmost
// first; Lowercase maps each character on its own (Rust's char::to_lowercase: no final-sigma
// rule; U+0130 becomes "i" + U+0307).
//
// Thread safety: immutable after construction.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace kestrel {

class Normalizer {
 public:
  enum class Kind { kNFC, kNFD, kNFKC, kNFKD, kPrepend, kReplace, kStrip, kLowercase };

  struct Step {
    Kind kind = Kind::kNFC;
    std::string text;                    // Prepend: the prefix; Replace: the content
    std::string literal;                 // Replace with a String pattern
    std::shared_ptr<const Regex> regex;  // Replace with a Regex pattern
    bool left = false, right = false;    // Strip
  };

  Normalizer() = default;
  explicit Normalizer(std::vector<Step> steps) : steps_(std::move(steps)) {}

  // Parses the "normalizer" value; throws kestrel::Error naming an unsupported type.
  static Normalizer from_json(const nlohmann::json& j);

  bool empty() const { return steps_.empty(); }

  // Returns `text` normalized. The result is either `text` itself (when nothing changes, the
  // common case, detected without calling utf8proc) or a view of `scratch`.
  // REQUIRES: text is valid UTF-8.
  std::string_view normalize(std::string_view text, std::string& scratch) const;

 private:
  std::vector<Step> steps_;
};

}  // namespace kestrel
