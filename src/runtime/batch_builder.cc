#include "runtime/batch_builder.h"

#include <algorithm>

#include "core/error.h"

namespace kestrel {

HostBatch build_host_batch(const ScheduledBatch& batch, int block_size) {
  HostBatch b;
  const int num_seqs = static_cast<int>(batch.seqs.size());
  b.input_ids.reserve(batch.num_tokens);
  b.positions.reserve(batch.num_tokens);
  b.slot_mapping.reserve(batch.num_tokens);
  b.query_start_loc.reserve(num_seqs + 1);
  b.query_start_loc.push_back(0);
  for (const ScheduledSeq& s : batch.seqs) {
    b.max_blocks = std::max(b.max_blocks, static_cast<int>(s.seq->block_table.size()));
  }
  b.block_tables.assign(static_cast<size_t>(num_seqs) * b.max_blocks, 0);

  for (int i = 0; i < num_seqs; ++i) {
    const ScheduledSeq& s = batch.seqs[i];
    const Sequence& seq = *s.seq;
    const int begin = seq.num_computed_tokens;
    const int end = begin + s.num_new_tokens;
    KS_ASSERT(s.num_new_tokens > 0 && end <= seq.num_tokens(), "seq {}: bad range [{}, {})",
              seq.seq_id, begin, end);
    KS_ASSERT(static_cast<int>(seq.block_table.size()) * block_size >= end,
              "seq {}: block table too short for {} tokens", seq.seq_id, end);
    // Position pos's logits give prompt token pos + 1's logprob.
    const int prompt_from = seq.computes_prompt_logprobs()
                                ? std::max(begin, static_cast<int>(seq.prompt_logprobs.size()))
                                : end;
    const int prompt_to = std::min(end, seq.num_prompt_tokens - 1);
    for (int pos = begin; pos < end; ++pos) {
      if (pos >= prompt_from && pos < prompt_to) {
        b.prompt_rows.push_back(static_cast<int>(b.input_ids.size()));
        b.prompt_seqs.push_back(i);
      }
      b.input_ids.push_back(seq.token_ids[pos]);
      b.positions.push_back(pos);
      b.slot_mapping.push_back(seq.block_table[pos / block_size] * block_size + pos % block_size);
    }
    b.query_start_loc.push_back(static_cast<int>(b.input_ids.size()));
    b.seq_lens.push_back(end);
    std::copy(seq.block_table.begin(), seq.block_table.end(),
              b.block_tables.begin() + static_cast<size_t>(i) * b.max_blocks);
    b.max_query_len = std::max(b.max_query_len, s.num_new_tokens);
    b.max_seq_len = std::max(b.max_seq_len, end);
    if (s.sample) {
      b.sample_rows.push_back(static_cast<int>(b.input_ids.size()) - 1);
      b.sample_seqs.push_back(i);
    }
  }
  return b;
}

}  // namespace kestrel
