// The tokenizer's vocabulary as a byte trie laid out in depth-first order, so that the
// tokens a byte automaton allows from a state are found in one forward scan that skips
// whole subtrees on a dead transition (grammar.h). Built once per tokenizer; immutable.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kestrel {
class Tokenizer;
}

namespace kestrel::structured {

class VocabTrie {
 public:
  // token_bytes[id]: the bytes token `id` adds to the text; empty for tokens that are never
  // allowed by a pattern (special tokens, ids the tokenizer does not know).
  // vocab_size: the model's vocabulary (>= token_bytes.size()); masks cover it.
  VocabTrie(const std::vector<std::string>& token_bytes, int vocab_size);
  // From a tokenizer: every known id that is not a special token.
  static VocabTrie from_tokenizer(const Tokenizer& tokenizer, int vocab_size);

  int vocab_size() const { return vocab_size_; }
  int mask_words() const { return (vocab_size_ + 31) / 32; }
  const std::string& bytes(int id) const { return bytes_[id]; }
  int num_ids() const { return static_cast<int>(bytes_.size()); }

  // Node 0 is the root (no byte). Node i > 0: byte_[i] follows its parent, depth_[i] >= 1,
  // its subtree is [i, end_[i]), and the tokens spelled by the path to it are
  // token_ids_[token_begin_[i], token_begin_[i + 1]).
  int num_nodes() const { return static_cast<int>(byte_.size()); }
  std::vector<uint8_t> byte_;
  std::vector<uint16_t> depth_;
  std::vector<int32_t> end_;
  std::vector<int32_t> token_begin_;  // num_nodes + 1 entries
  std::vector<int32_t> token_ids_;
  int max_depth_ = 0;

 private:
  std::vector<std::string> bytes_;
  int vocab_size_ = 0;
};

}  // namespace kestrel::structured
