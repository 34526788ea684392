#include "runtime/constraint_masks.h"

#include <algorithm>

#include "core/error.h"

namespace kestrel {

void append_allowed_mask(const Sequence& seq, std::span<const int> eos_token_ids, int vocab,
                         std::vector<uint32_t>& out, int own_pending) {
  KS_ASSERT(seq.constraint != nullptr, "sequence {} has no constraint", seq.seq_id);
  KS_ASSERT(seq.num_pending_tokens == own_pending,
            "sequence {}: a constrained row sampled with {} pending tokens", seq.seq_id,
            seq.num_pending_tokens - own_pending);
  const size_t words = static_cast<size_t>(mask_words(vocab));
  const size_t at = out.size();
  out.resize(at + words, 0);
  const std::span<const uint32_t> allowed = seq.constraint->allowed_tokens();
  std::copy_n(allowed.begin(), std::min(words, allowed.size()), out.begin() + at);
  if (words * 32 > static_cast<size_t>(vocab)) {
    out[at + words - 1] &= (1u << (vocab % 32)) - 1;  // nothing past the vocabulary
  }
  if (seq.constraint->can_end()) {
    for (int eos : eos_token_ids) {
      if (eos >= 0 && eos < vocab) out[at + eos / 32] |= 1u << (eos % 32);
    }
  }
  // Only a model without EOS ids gets here (a constraint always allows something or may
  // end): the row goes unconstrained rather than failing the step of every row.
  if (std::all_of(out.begin() + at, out.end(), [](uint32_t w) { return w == 0; })) {
    std::fill(out.begin() + at, out.end(), ~0u);
    if (words * 32 > static_cast<size_t>(vocab)) out.back() &= (1u << (vocab % 32)) - 1;
  }
}

}  // namespace kestrel
