// GPT-2's byte-level alphabet: a reversible map from the 256 byte values to 256 printable
// Unicode characters, so that any byte string can be spelled with vocabulary symbols.
// Printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') map to themselves; the other 68
// bytes map, in increasing order, to U+0100, U+0101, ... (so ' ' is 'Ġ', '\n' is 'Ċ').
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kestrel::byte_level {

// UTF-8 spelling of the character that stands for byte b.
std::string_view char_of(uint8_t b);

// Byte for code point cp, or -1 when cp is not in the alphabet.
int byte_of(char32_t cp);

// Spells raw bytes with the alphabet ("a b" -> "aĠb").
std::string encode(std::string_view bytes);

// Inverse of encode() as HF's ByteLevel decoder does it: when every character of `token` is
// in the alphabet, returns the bytes they stand for; otherwise returns `token` unchanged
// (added tokens such as "<|im_end|>" decode to their own text this way). REQUIRES: token is
// valid UTF-8.
std::string decode(std::string_view token);

}  // namespace kestrel::byte_level
