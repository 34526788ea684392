// UTF-8 helpers that give template strings Python's `str` semantics: lengths, indices and
// slices count code points, and whitespace and case follow Python's rules (case mapping
// covers ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic; other scripts are left as is).
//
// Invalid UTF-8 never crashes these functions: a stray byte counts as one code point and is
// copied through unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kestrel::chat {

// Decodes the code point starting at `pos` and advances `pos` past it.
char32_t utf8_next(std::string_view s, size_t& pos);
void utf8_append(std::string& out, char32_t cp);

size_t utf8_length(std::string_view s);
// Byte offset of each code point plus a final entry for s.size().
std::vector<size_t> utf8_offsets(std::string_view s);
// Code points of `s` as separate UTF-8 strings (Python's `list(s)`).
std::vector<std::string> utf8_chars(std::string_view s);
// Number of code points in s[0, byte_pos).
size_t utf8_index_of_byte(std::string_view s, size_t byte_pos);

// Python's str.isspace() for one code point.
bool py_is_space(char32_t cp);
// Python's str.splitlines() line boundaries.
bool py_is_line_break(char32_t cp);
char32_t py_to_upper(char32_t cp);
char32_t py_to_lower(char32_t cp);
bool py_is_cased(char32_t cp);
bool py_is_printable(char32_t cp);

std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_title(std::string_view s);       // str.title()
std::string py_capitalize(std::string_view s);  // str.capitalize()

// str.strip()/lstrip()/rstrip(); `chars` == nullptr strips whitespace.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);
std::vector<std::string> py_splitlines(std::string_view s);

}  // namespace kestrel::chat
