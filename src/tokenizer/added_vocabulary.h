// Added tokens ("added_tokens" of a tokenizer.json): strings such as <|im_start|> that are
// cut out of the text before the normalizer, pre-tokenizer and BPE see it, as HF does:
//   - matching is leftmost-longest over all tokens, non-overlapping;
//   - a `single_word` token only counts when no word character (\w) touches either side; a
//     discarded match still consumes its span for the next search (as HF's matcher does);
//   - `lstrip` / `rstrip` make the token swallow the white space on that side;
//   - tokens with normalized=false match the raw text; normalized=true ones match the text
//     after the normalizer, with their own content normalized the same way.
//
// Thread safety: immutable after construction.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kestrel {

struct AddedToken {
  int id = -1;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

// A slice of the input: an added token (id >= 0) or plain text to tokenize (id == -1).
struct Segment {
  size_t begin;
  size_t end;
  int id;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `patterns[i]` is what tokens[i] must match (its content, normalized when it matches the
  // normalized text).
  AddedTokenMatcher(std::vector<AddedToken> tokens, std::vector<std::string> patterns);

  bool empty() const { return tokens_.empty(); }

  // Appends the segments of `text` (covering it; no empty plain segments) to `out`.
  void split(std::string_view text, std::vector<Segment>& out) const;

 private:
  struct Node {
    std::unordered_map<uint8_t, int> next;
    int token = -1;  // index into tokens_ of the token ending here
  };
  // Leftmost-longest match starting at or after `from`: returns false when none.
  bool find(std::string_view text, size_t from, size_t& begin, size_t& end, int& token) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> trie_;
  bool first_byte_[256] = {};
};

// True when the code point counts as a word character for `single_word` (\w in the Rust
// regex crate: letters, marks, decimal digits, connector punctuation, ZWJ/ZWNJ).
bool is_word_char(char32_t cp);

// Unicode White_Space, which lstrip/rstrip swallow (\s in the Rust regex crate).
bool is_white_space(char32_t cp);

}  // namespace kestrel
