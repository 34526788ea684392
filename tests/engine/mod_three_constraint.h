// A TokenConstraint whose every mask follows from all the tokens before it: it allows the ids
// t with (t + the sum of its tokens so far) % 3 == 0, and never ends. A row sampled before
// its previous token was settled (the engine's overlap) gets another mask, and so other
// tokens: the GPU and tensor-parallel tests of deferred sampling use it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kestrel/token_constraint.h"

namespace kestrel::testing {

class ModThreeConstraint : public TokenConstraint {
 public:
  explicit ModThreeConstraint(int vocab) : vocab_(vocab), words_((vocab + 31) / 32) {}
  std::span<const uint32_t> allowed_tokens() override {
    std::fill(words_.begin(), words_.end(), 0u);
    for (int t = 0; t < vocab_; ++t) {
      if ((t + sum_) % 3 == 0) words_[t / 32] |= 1u << (t % 32);
    }
    return words_;
  }
  bool can_end() const override { return false; }
  void accept(int token_id) override { sum_ = (sum_ + token_id) % 3; }

 private:
  const int vocab_;
  std::vector<uint32_t> words_;
  int sum_ = 0;
};

class ModThreeFactory : public TokenConstraintFactory {
 public:
  explicit ModThreeFactory(int vocab) : vocab_(vocab) {}
  std::unique_ptr<TokenConstraint> start() const override {
    return std::make_unique<ModThreeConstraint>(vocab_);
  }

 private:
  const int vocab_;
};

}  // namespace kestrel::testing
