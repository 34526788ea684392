#include "structured/grammar.h"

#include <functional>
#include <string_view>

#include "core/error.h"

namespace kestrel::structured {

Grammar::Grammar(ByteDfa dfa, std::shared_ptr<const VocabTrie> vocab)
    : dfa_(std::move(dfa)), vocab_(std::move(vocab)), masks_(dfa_.num_states()) {}

std::unique_ptr<TokenConstraint> Grammar::start() const {
  return std::make_unique<GrammarMatcher>(shared_from_this());
}

const Grammar::Mask& Grammar::mask_of(int32_t state) const {
  KS_ASSERT(state >= 0 && state < dfa_.num_states(), "DFA state {} of {}", state, dfa_.num_states());
  std::lock_guard<std::mutex> lock(mu_);
  if (masks_[state] != nullptr) return *masks_[state];
  auto m = std::make_unique<Mask>();
  m->words.assign(vocab_->mask_words(), 0);
  const VocabTrie& t = *vocab_;
  std::vector<int32_t> at(t.max_depth_ + 1);  // DFA state after the bytes of depth d
  at[0] = state;
  const int n = t.num_nodes();
  for (int i = 1; i < n;) {
    const int32_t s = dfa_.next(at[t.depth_[i] - 1], t.byte_[i]);
    if (s == ByteDfa::kDead) {
      i = t.end_[i];
      continue;
    }
    at[t.depth_[i]] = s;
    for (int32_t k = t.token_begin_[i]; k < t.token_begin_[i + 1]; ++k) {
      const int32_t id = t.token_ids_[k];
      m->words[id >> 5] |= 1u << (id & 31);
      m->any = true;
    }
    ++i;
  }
  const std::string_view bytes(reinterpret_cast<const char*>(m->words.data()), m->words.size() * 4);
  std::vector<std::unique_ptr<Mask>>& same_hash = distinct_[std::hash<std::string_view>{}(bytes)];
  for (const auto& other : same_hash) {
    if (other->words == m->words) return *(masks_[state] = other.get());
  }
  same_hash.push_back(std::move(m));
  return *(masks_[state] = same_hash.back().get());
}

std::span<const uint32_t> Grammar::mask(int32_t state) const { return mask_of(state).words; }

bool Grammar::any_allowed(int32_t state) const { return mask_of(state).any; }

int32_t Grammar::walk(int32_t state, std::string_view bytes) const {
  for (char c : bytes) {
    if (state == ByteDfa::kDead) break;
    state = dfa_.next(state, static_cast<uint8_t>(c));
  }
  return state;
}

int Grammar::num_cached_masks() const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const Mask* m : masks_) n += m != nullptr ? 1 : 0;
  return n;
}

int Grammar::num_distinct_masks() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [hash, masks] : distinct_) n += masks.size();
  return static_cast<int>(n);
}

std::span<const uint32_t> GrammarMatcher::allowed_tokens() {
  if (ended_) return {};
  return grammar_->mask(state_);
}

bool GrammarMatcher::can_end() const {
  return ended_ || grammar_->dfa().accepting(state_) || !grammar_->any_allowed(state_);
}

void GrammarMatcher::accept(int token_id) {
  if (ended_) return;
  const VocabTrie& v = grammar_->vocab();
  if (token_id < 0 || token_id >= v.num_ids() || v.bytes(token_id).empty()) {
    ended_ = true;
    return;
  }
  const int32_t next = grammar_->walk(state_, v.bytes(token_id));
  if (next == ByteDfa::kDead) {
    ended_ = true;
  } else {
    state_ = next;
  }
}

}  // namespace kestrel::structured
