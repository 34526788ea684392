#include "runtime/device_sampling_batch.h"

#include <algorithm>

#include "core/error.h"
#include "runtime/constraint_masks.h"
#include "sampling/penalties.h"

namespace kestrel {

SamplingBatch make_sampling_batch(const ScheduledBatch& batch, const std::vector<int>& sample_seqs,
                                  std::span<const int> eos_token_ids, int vocab_size, RowView view) {
  SamplingBatch b;
  const size_t n = sample_seqs.size();
  b.num_rows = static_cast<int>(n);
  for (auto* v : {&b.temperature, &b.top_p, &b.min_p, &b.repetition_penalty, &b.presence_penalty,
                  &b.frequency_penalty}) {
    v->reserve(n);
  }
  b.top_k.reserve(n);
  b.seed.reserve(n);
  b.position.reserve(n);
  b.num_logprobs.reserve(n);
  b.prompt_offsets.assign(1, 0);
  b.output_offsets.assign(1, 0);
  b.masked_offsets.assign(1, 0);
  b.bias_offsets.assign(1, 0);

  auto append = [](std::vector<int>& dst, std::span<const int> ids) {
    dst.insert(dst.end(), ids.begin(), ids.end());
  };
  auto mask = [&](std::span<const int> ids) {
    for (int t : ids) {
      if (t >= 0 && t < vocab_size) b.masked_tokens.push_back(t);
    }
  };

  b.mask_words = mask_words(vocab_size);
  int row = 0;
  for (int seq_index : sample_seqs) {
    KS_ASSERT(seq_index >= 0 && static_cast<size_t>(seq_index) < batch.seqs.size(),
              "sample_seqs entry {} outside the batch of {}", seq_index, batch.seqs.size());
    const Sequence& seq = *batch.seqs[seq_index].seq;
    KS_ASSERT(seq.params != nullptr, "sequence {} has no sampling params", seq.seq_id);
    const SamplingParams& p = *seq.params;
    const RowTokens tokens = row_tokens(seq, view);
    b.add_row_params(p, seq.seed, tokens.position);

    if (p.repetition_penalty != 1.0f) append(b.prompt_tokens, seq.prompt_token_ids());
    if (has_penalties(p)) append(b.output_tokens, tokens.output);
    for (const auto& [id, bias] : p.logit_bias) {
      b.bias_tokens.push_back(id);
      b.bias_values.push_back(bias);
    }
    if (static_cast<int>(tokens.output.size()) < std::max(p.min_tokens, 0)) {
      mask(p.stop_token_ids);
      if (!p.ignore_eos) mask(eos_token_ids);
    }
    if (tokens.constrained) {
      if (b.allowed_row.empty()) b.allowed_row.assign(b.num_rows, -1);  // rows before: none
      b.allowed_row[row] = static_cast<int>(b.allowed_masks.size() / mask_words(vocab_size));
      append_allowed_mask(seq, eos_token_ids, vocab_size, b.allowed_masks, tokens.own_pending);
    }
    ++row;
    b.prompt_offsets.push_back(static_cast<int>(b.prompt_tokens.size()));
    b.output_offsets.push_back(static_cast<int>(b.output_tokens.size()));
    b.masked_offsets.push_back(static_cast<int>(b.masked_tokens.size()));
    b.bias_offsets.push_back(static_cast<int>(b.bias_tokens.size()));
  }
  return b;
}

}  // namespace kestrel
