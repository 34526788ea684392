// TokenConstraint: which tokens a sequence may generate next (structured outputs).
//
// The engine gives every sequence of a request whose SamplingParams carry a
// TokenConstraintFactory its own TokenConstraint (factory->start()). Before each sampling
// of that sequence the sampler asks allowed_tokens() and masks every other token to -inf
// (before penalties, temperature and the top-k/top-p/min-p filters); after the token is
// known the engine calls accept(). The model's EOS tokens are added to the mask when
// can_end() holds. src/structured implements it for regexes, JSON schemas and choices.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

namespace kestrel {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Bit (t % 32) of word t / 32 is set when token t may come next; tokens past the span's
  // end are not allowed. Valid until the next call on this object. Never empty of allowed
  // tokens unless can_end().
  virtual std::span<const uint32_t> allowed_tokens() = 0;
  // Whether the output so far is complete (EOS may come next).
  virtual bool can_end() const = 0;
  // The token generated next. A token that was not allowed (EOS included) ends the
  // constraint: from then on nothing but EOS is allowed.
  virtual void accept(int token_id) = 0;
};

// Makes the per-sequence constraints of one request. Immutable; start() may be called from
// any thread.
class TokenConstraintFactory {
 public:
  virtual ~TokenConstraintFactory() = default;
  virtual std::unique_ptr<TokenConstraint> start() const = 0;
};

}  // namespace kestrel
