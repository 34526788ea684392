// Turns a ScheduledBatch into the flat host arrays the model consumes (nano-vLLM's
// prepare_prefill/prepare_decode, unified: prefill chunks and decodes in one batch).
#pragma once

#include <vector>

#include "engine/model_executor.h"

namespace kestrel {

struct HostBatch {
  std::vector<int> input_ids;        // [T]
  std::vector<int> positions;        // [T]
  std::vector<int> slot_mapping;     // [T]
  std::vector<int> query_start_loc;  // [B + 1]
  std::vector<int> seq_lens;         // [B]
  std::vector<int> block_tables;     // [B, max_blocks], row-major, padded with 0
  int max_blocks = 0;
  int max_query_len = 0;
  int max_seq_len = 0;
  std::vector<int> sample_rows;      // token rows whose logits are sampled
  std::vector<int> sample_seqs;      // batch index of each sampled row
  // Token rows whose logits give prompt logprobs (Sequence::computes_prompt_logprobs(): the
  // prompt positions up to the second-to-last, past the entries the sequence holds), and
  // the batch index of each.
  std::vector<int> prompt_rows;
  std::vector<int> prompt_seqs;
  // Tensor parallelism with the vocab-parallel sampler: what every rank needs to sample the
  // rows itself (tp_protocol.h's encode_row_sampling). Empty: rank 0 samples the gathered
  // logits (or nothing is sampled).
  std::vector<int> row_sampling;
};

// REQUIRES: every sequence's block table covers its tokens up to
// num_computed_tokens + num_new_tokens.
HostBatch build_host_batch(const ScheduledBatch& batch, int block_size);

}  // namespace kestrel
