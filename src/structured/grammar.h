// Grammar: a structured-output pattern compiled against a vocabulary (the factory a
// request's SamplingParams carry), and GrammarMatcher, one sequence's place in it.
//
// The token mask of a DFA state (which tokens' bytes the DFA can read from that state
// without dying) is computed the first time a sequence reaches the state, by one scan of
// the vocabulary trie, and then kept for every sequence of every request sharing the
// Grammar: a step of a warmed-up grammar costs a cache lookup per row.
#pragma once

#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kestrel/token_constraint.h"
#include "structured/byte_dfa.h"
#include "structured/vocab_trie.h"

namespace kestrel::structured {

class Grammar : public TokenConstraintFactory, public std::enable_shared_from_this<Grammar> {
 public:
  // Construct through std::make_shared (start() hands matchers a shared_ptr to it).
  Grammar(ByteDfa dfa, std::shared_ptr<const VocabTrie> vocab);

  std::unique_ptr<TokenConstraint> start() const override;

  // The tokens allowed from DFA `state` (vocab().mask_words() words). Thread-safe; the
  // span stays valid as long as the Grammar.
  std::span<const uint32_t> mask(int32_t state) const;
  // False when no token is allowed from `state` (a vocabulary that lacks some byte).
  bool any_allowed(int32_t state) const;
  // `state` advanced over `bytes`, or ByteDfa::kDead.
  int32_t walk(int32_t state, std::string_view bytes) const;

  const ByteDfa& dfa() const { return dfa_; }
  const VocabTrie& vocab() const { return *vocab_; }
  // DFA states whose mask has been computed so far, and how many distinct masks they have.
  int num_cached_masks() const;
  int num_distinct_masks() const;

 private:
  struct Mask {
    std::vector<uint32_t> words;
    bool any = false;
  };
  const Mask& mask_of(int32_t state) const;

  ByteDfa dfa_;
  std::shared_ptr<const VocabTrie> vocab_;
  mutable std::mutex mu_;
  // Per DFA state, filled on first use. States with the same mask share it (inside a JSON
  // string, every nesting context has its own states but one mask): memory grows with the
  // distinct masks, ~19 KB each at Qwen3's vocabulary, not with the states.
  mutable std::vector<const Mask*> masks_;
  mutable std::unordered_map<size_t, std::vector<std::unique_ptr<Mask>>> distinct_;  // by hash
};

class GrammarMatcher : public TokenConstraint {
 public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {}

  std::span<const uint32_t> allowed_tokens() override;
  bool can_end() const override;
  void accept(int token_id) override;

  bool ended() const { return ended_; }
  int32_t state() const { return state_; }

 private:
  std::shared_ptr<const Grammar> grammar_;
  int32_t state_ = 0;
  bool ended_ = false;
};

}  // namespace kestrel::structured
