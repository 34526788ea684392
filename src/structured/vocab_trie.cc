#include "structured/vocab_trie.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::structured {

VocabTrie::VocabTrie(const std::vector<std::string>& token_bytes, int vocab_size)
    : bytes_(token_bytes), vocab_size_(vocab_size) {
  KS_CHECK(vocab_size >= static_cast<int>(token_bytes.size()),
           "vocabulary trie: {} tokens for a model vocabulary of {}", token_bytes.size(), vocab_size);
  std::vector<int32_t> order;
  for (int32_t id = 0; id < static_cast<int32_t>(bytes_.size()); ++id) {
    if (!bytes_[id].empty()) order.push_back(id);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return bytes_[a] < bytes_[b]; });

  byte_.push_back(0);
  depth_.push_back(0);
  end_.push_back(0);
  std::vector<int32_t> tokens_of;  // per node, in node order
  tokens_of.push_back(0);
  std::vector<int32_t> path{0};  // open nodes, root first; path[d] is at depth d
  std::string prev;
  for (int32_t id : order) {
    const std::string& s = bytes_[id];
    size_t common = 0;
    while (common < s.size() && common < prev.size() && s[common] == prev[common]) ++common;
    while (path.size() > common + 1) {
      end_[path.back()] = num_nodes();
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      byte_.push_back(static_cast<uint8_t>(s[d]));
      KS_CHECK(d + 1 < 65536, "vocabulary trie: a token of {} bytes", s.size());
      depth_.push_back(static_cast<uint16_t>(d + 1));
      end_.push_back(0);
      tokens_of.push_back(0);
      path.push_back(num_nodes() - 1);
    }
    max_depth_ = std::max(max_depth_, static_cast<int>(s.size()));
    ++tokens_of[path.back()];
    token_ids_.push_back(id);
    prev = s;
  }
  while (!path.empty()) {
    end_[path.back()] = num_nodes();
    path.pop_back();
  }
  token_begin_.assign(num_nodes() + 1, 0);
  for (int i = 0; i < num_nodes(); ++i) token_begin_[i + 1] = token_begin_[i] + tokens_of[i];
}

VocabTrie VocabTrie::from_tokenizer(const Tokenizer& tokenizer, int vocab_size) {
  const int n = std::min(tokenizer.vocab_size(), vocab_size);
  std::vector<std::string> bytes(n);
  for (int id = 0; id < n; ++id) {
    if (tokenizer.is_known(id) && !tokenizer.is_special(id)) bytes[id] = std::string(tokenizer.token_bytes(id));
  }
  return VocabTrie(bytes, vocab_size);
}

}  // namespace kestrel::structured
