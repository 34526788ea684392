#include "structured/after_reasoning.h"

#include <utility>
#include <vector>

#include "core/error.h"

namespace kestrel::structured {
namespace {

class AfterReasoning : public TokenConstraint {
 public:
  AfterReasoning(std::unique_ptr<TokenConstraint> answer, ThinkTags tags,
                 std::shared_ptr<const std::vector<uint32_t>> all, bool thinking)
      : answer_(std::move(answer)),
        tags_(tags),
        all_(std::move(all)),
        state_(thinking ? State::kThinking : State::kStart) {}

  std::span<const uint32_t> allowed_tokens() override {
    switch (state_) {
      case State::kThinking:
        return *all_;
      case State::kAnswer:
        return answer_->allowed_tokens();
      case State::kStart: {
        // The answer's first tokens, or the open tag.
        const std::span<const uint32_t> first = answer_->allowed_tokens();
        start_.assign(first.begin(), first.end());
        const size_t word = static_cast<size_t>(tags_.open) / 32;
        if (start_.size() <= word) start_.resize(word + 1, 0);
        start_[word] |= 1u << (tags_.open % 32);
        return start_;
      }
    }
    return {};
  }

  // Thinking is never a complete output: the answer has not begun.
  bool can_end() const override { return state_ != State::kThinking && answer_->can_end(); }

  void accept(int token_id) override {
    switch (state_) {
      case State::kStart:
        if (token_id == tags_.open) {
          state_ = State::kThinking;
          return;
        }
        state_ = State::kAnswer;
        answer_->accept(token_id);
        return;
      case State::kThinking:
        if (token_id == tags_.close) state_ = State::kAnswer;
        return;
      case State::kAnswer:
        answer_->accept(token_id);
        return;
    }
  }

 private:
  enum class State { kStart, kThinking, kAnswer };
  std::unique_ptr<TokenConstraint> answer_;
  const ThinkTags tags_;
  std::shared_ptr<const std::vector<uint32_t>> all_;
  State state_;
  std::vector<uint32_t> start_;
};

class AfterReasoningFactory : public TokenConstraintFactory {
 public:
  AfterReasoningFactory(std::shared_ptr<const TokenConstraintFactory> answer, ThinkTags tags,
                        int vocab_size, bool thinking)
      : answer_(std::move(answer)), tags_(tags), thinking_(thinking) {
    auto all = std::make_shared<std::vector<uint32_t>>((vocab_size + 31) / 32, ~0u);
    if (vocab_size % 32 != 0) all->back() = (1u << (vocab_size % 32)) - 1;
    all_ = std::move(all);
  }

  std::unique_ptr<TokenConstraint> start() const override {
    return std::make_unique<AfterReasoning>(answer_->start(), tags_, all_, thinking_);
  }

 private:
  std::shared_ptr<const TokenConstraintFactory> answer_;
  const ThinkTags tags_;
  const bool thinking_;
  std::shared_ptr<const std::vector<uint32_t>> all_;
};

}  // namespace

std::shared_ptr<const TokenConstraintFactory> after_reasoning(
    std::shared_ptr<const TokenConstraintFactory> answer, ThinkTags tags, int vocab_size,
    bool prompt_opens_thinking) {
  KS_ASSERT(answer != nullptr && vocab_size > 0 && tags.open >= 0 && tags.open < vocab_size &&
                tags.close >= 0 && tags.close < vocab_size,
            "after_reasoning: tags {} and {} in a vocabulary of {}", tags.open, tags.close,
            vocab_size);
  return std::make_shared<AfterReasoningFactory>(std::move(answer), tags, vocab_size,
                                                 prompt_opens_thinking);
}

}  // namespace kestrel::structured
