// Regex for pre-tokenizer patterns: PCRE2 (UTF, UCP, JIT) made to behave like Oniguruma,
// the engine Hugging Face `tokenizers` uses for `Split` patterns.
//
// The two engines are both backtracking, leftmost-first, with the same meaning for \p{L},
// \p{N}, (?i:...), lookahead and bounded repeats. Where they differ the pattern is rewritten
// before compiling:
//   \p{L}, \p{N} (and \pL, \pN, \P{..} outside a class): HF's Oniguruma has Unicode 16.0
//           tables, Debian 12's PCRE2 has 14.0; the letters and numbers added since are
//           spliced in (unicode_fixups.inc, generated from HF's own answer for every code
//           point by tools/tokenizer_unicode_classes.py + tokenizer_unicode_gen.py).
//   \s, \S  Oniguruma: Unicode White_Space. PCRE2 with UCP adds U+180E (via \h), so \s is
//           spelled out as an explicit class. (\S inside a [...] class is left to PCRE2.)
//   \h, \H  Oniguruma: hex digit. PCRE2: horizontal space. Spelled out as [0-9a-fA-F].
//   ^, $    Oniguruma (Ruby syntax): line anchors, so PCRE2_MULTILINE is set.
//
// Thread safety: a Regex is immutable after construction; find_all() may run concurrently
// from many threads (match data and JIT stack are per thread).
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace kestrel {

class Regex {
 public:
  // Compiles `pattern`; a literal string when `literal` is true. Throws kestrel::Error with
  // PCRE2's message and the offset on a bad pattern.
  explicit Regex(const std::string& pattern, bool literal = false);

  // Calls fn(begin, end) for each non-empty, non-overlapping match in `text`, left to right
  // (byte offsets). REQUIRES: text is valid UTF-8 (not re-checked).
  template <typename Fn>
  void find_all(std::string_view text, Fn&& fn) const {
    // The Unicode fix-ups make PCRE2's \p{L} loops slower; text without any of the added
    // code points gets the same matches from the pattern without them.
    const void* code = fast_code_ && !has_fixup_chars(text) ? fast_code_.get() : code_.get();
    size_t pos = 0;
    size_t begin, end;
    while (next_match(code, text, pos, begin, end)) {
      if (end > begin) fn(begin, end);
      pos = end > begin ? end : skip_char(text, end);
    }
  }

  const std::string& pattern() const { return pattern_; }

 private:
  std::shared_ptr<void> compile(const std::string& translated, bool literal) const;
  bool next_match(const void* code, std::string_view text, size_t from, size_t& begin,
                  size_t& end) const;
  static size_t skip_char(std::string_view text, size_t pos);
  // True when `text` holds a code point that only the fix-ups put in \p{L} / \p{N}.
  static bool has_fixup_chars(std::string_view text);

  std::string pattern_;
  std::shared_ptr<void> code_;       // pcre2_code_8 with the Unicode fix-ups
  std::shared_ptr<void> fast_code_;  // without them; null when they change nothing
};

// The Oniguruma-compatible rewrite described above (exposed for tests). unicode_fixups:
// add the newer letters and numbers to \p{L} and \p{N}.
std::string oniguruma_to_pcre2(std::string_view pattern, bool unicode_fixups = true);

}  // namespace kestrel
