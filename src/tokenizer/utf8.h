// UTF-8 helpers shared by the tokenizer and the detokenizer.
//
// "Valid" follows RFC 3629: no overlong forms, no surrogates (U+D800..U+DFFF), nothing
// above U+10FFFF. Lossy conversion follows Rust's String::from_utf8_lossy (and the WHATWG
// encoding standard): each maximal subpart of an ill-formed sequence becomes one U+FFFD.
// That is what Hugging Face `tokenizers` does when a ByteLevel decoder meets bytes that are
// not UTF-8, so decode() here gives the same text as HF's decode.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kestrel::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

enum class SeqStatus { kValid, kInvalid, kTruncated };

struct Seq {
  SeqStatus status;
  size_t length;  // bytes the sequence covers (>= 1)
};

// Classifies the sequence that starts at s[pos] (pos < s.size()). kTruncated: a proper prefix
// of a valid sequence that runs into the end of `s` (more bytes could complete it).
// kInvalid: `length` is the maximal subpart to replace by one U+FFFD.
Seq classify(std::string_view s, size_t pos);

// Byte offset of the first ill-formed (or truncated) sequence, or npos when `s` is valid.
size_t find_invalid(std::string_view s);

// The code point at s[pos]; advances pos. REQUIRES: s is valid UTF-8 at pos.
char32_t decode(std::string_view s, size_t& pos);

// Appends the UTF-8 encoding of cp (cp <= U+10FFFF, not a surrogate).
void append(std::string& out, char32_t cp);

// Appends `bytes` to `out` with every maximal ill-formed subpart replaced by U+FFFD. A
// truncated sequence at the end also becomes one U+FFFD.
void append_lossy(std::string& out, std::string_view bytes);

// Number of trailing bytes of `s` (0..3) that form a truncated sequence, i.e. bytes that a
// later byte could still complete into a character.
size_t truncated_tail(std::string_view s);

}  // namespace kestrel::utf8
