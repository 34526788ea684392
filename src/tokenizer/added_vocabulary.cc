#include "tokenizer/added_vocabulary.h"

#include <utf8proc.h>

#include <algorithm>

#include "tokenizer/utf8.h"

namespace kestrel {
namespace {

char32_t last_char(std::string_view s) {
  size_t pos = s.size() - 1;
  while (pos > 0 && (static_cast<uint8_t>(s[pos]) & 0xC0) == 0x80) --pos;
  return utf8::decode(s, pos);
}

}  // namespace

bool is_word_char(char32_t cp) {
  if (cp == 0x200C || cp == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

bool is_white_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens,
                                     std::vector<std::string> patterns)
    : tokens_(std::move(tokens)) {
  trie_.emplace_back();
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& pat = patterns[t];
    if (pat.empty()) continue;  // HF never matches an empty token
    int node = 0;
    for (char c : pat) {
      const auto b = static_cast<uint8_t>(c);
      auto it = trie_[node].next.find(b);
      if (it == trie_[node].next.end()) {
        trie_.emplace_back();
        const int child = static_cast<int>(trie_.size()) - 1;
        trie_[node].next.emplace(b, child);
        node = child;
      } else {
        node = it->second;
      }
    }
    // Two tokens with the same pattern: the first one listed wins, as in HF's matcher.
    if (trie_[node].token < 0) trie_[node].token = static_cast<int>(t);
    first_byte_[static_cast<uint8_t>(pat[0])] = true;
  }
}

bool AddedTokenMatcher::find(std::string_view text, size_t from, size_t& begin, size_t& end,
                             int& token) const {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t start = from; start < text.size(); ++start) {
    if (!first_byte_[p[start]]) continue;
    int node = 0;
    int best = -1;
    size_t best_end = 0;
    for (size_t i = start; i < text.size(); ++i) {
      auto it = trie_[node].next.find(p[i]);
      if (it == trie_[node].next.end()) break;
      node = it->second;
      if (trie_[node].token >= 0) {
        best = trie_[node].token;
        best_end = i + 1;
      }
    }
    if (best >= 0) {
      begin = start;
      end = best_end;
      token = best;
      return true;
    }
  }
  return false;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<Segment>& out) const {
  size_t start_offset = 0;
  size_t search_from = 0;
  size_t mbegin, mend;
  int t;
  while (search_from < text.size() && find(text, search_from, mbegin, mend, t)) {
    search_from = mend;
    const AddedToken& tok = tokens_[t];
    size_t begin = mbegin, end = mend;
    if (tok.single_word) {
      const bool word_before = begin > 0 && is_word_char(last_char(text.substr(0, begin)));
      size_t pos = end;
      const bool word_after = end < text.size() && is_word_char(utf8::decode(text, pos));
      if (word_before || word_after) continue;
    }
    if (tok.lstrip) {
      size_t s = begin;
      while (s > 0 && is_white_space(last_char(text.substr(0, s)))) {
        --s;
        while (s > 0 && (static_cast<uint8_t>(text[s]) & 0xC0) == 0x80) --s;
      }
      begin = std::max(s, start_offset);
    }
    if (tok.rstrip) {
      size_t e = end;
      while (e < text.size()) {
        size_t next = e;
        if (!is_white_space(utf8::decode(text, next))) break;
        e = next;
      }
      end = e;
    }
    if (start_offset < begin) out.push_back({start_offset, begin, -1});
    out.push_back({begin, end, tok.id});
    start_offset = end;
  }
  if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
}

}  // namespace kestrel
