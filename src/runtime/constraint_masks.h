// The allowed-token masks of a step's constrained rows (structured outputs,
// kestrel/token_constraint.h), as both samplers take them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/sequence.h"

namespace kestrel {

// Words of a mask over `vocab` tokens: bit t of word t / 32.
inline int mask_words(int vocab) { return (vocab + 31) / 32; }

// Appends mask_words(vocab) words to `out`: the tokens seq.constraint allows next, plus
// `eos_token_ids` when it may end (every token when that leaves none: a model without EOS
// ids). REQUIRES: seq.constraint, and no pending token but the row's own `own_pending`
// (sampled_row.h): the engine settles the step before, or defers this step's sampling until
// it is settled (llm_engine.h).
void append_allowed_mask(const Sequence& seq, std::span<const int> eos_token_ids, int vocab,
                         std::vector<uint32_t>& out, int own_pending = 0);

}  // namespace kestrel
