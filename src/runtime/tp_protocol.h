// The messages rank 0 broadcasts to the other ranks of a tensor-parallel group over the
// host ProcessGroup (docs/parallel.md): once the start-up (model directory and engine
// config), then one per device step. Every rank runs the same step on its shard, so every
// rank issues the same collectives in the same order.
//
// A step travels as two broadcasts: a fixed StepHeader, then (for kForward) the HostBatch
// arrays the header sizes: input_ids, positions, slot_mapping [T] | query_start_loc [B + 1]
// | seq_lens [B] | block_tables [B, max_blocks] | sample_rows [S] | prompt_rows [P] |
// row_sampling [0 or 4 S], all i32. sample_seqs and prompt_seqs do not travel: workers sample
// only through the vocab-parallel sampler, from row_sampling.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kestrel/engine_config.h"
#include "parallel/process_group.h"
#include "backend/sampling_batch.h"
#include "runtime/batch_builder.h"

namespace kestrel {

enum class StepKind : int32_t {
  kForward = 1,     // run the forward over the HostBatch that follows
  kTimeDecode = 2,  // ModelRunner::time_decode_forward(args[0], args[1], args[2])
  kShutdown = 3,    // leave the loop and exit 0
  kKvClamped = 4,   // ModelRunner::kv_cache_clamped: every rank adds its fp8 clamp count
};

struct StepHeader {
  StepKind kind = StepKind::kShutdown;
  int32_t num_tokens = 0, num_seqs = 0, num_rows = 0, max_blocks = 0;
  int32_t max_query_len = 0, max_seq_len = 0;
  int32_t args[3] = {0, 0, 0};
  int32_t num_prompt_rows = 0;  // P
  int32_t num_row_sampling = 0;  // 0 or 4 S
};

// The vocab-parallel sampler's rows on the wire: per row temperature (float bits), seed (low
// and high 32 bits), position. REQUIRES shardable(batch): nothing else of a row matters then.
std::vector<int> encode_row_sampling(const SamplingBatch& batch);
// The batch a worker stages from them (the same rows as rank 0's, as the sampler sees them).
SamplingBatch decode_row_sampling(const std::vector<int>& words);

// Rank 0: sends `hb` (kForward). Other ranks: receive_step() fills the header and, for
// kForward, `hb`. Throws kestrel::Error from the group (a dead peer, a timeout).
void send_forward(ProcessGroup& group, const HostBatch& hb);
void send_header(ProcessGroup& group, const StepHeader& header);
StepHeader receive_step(ProcessGroup& group, HostBatch& hb);

// Start-up: rank 0's model directory and config to every rank (the workers' arguments are
// ignored). Returns what rank 0 sent.
struct StartupMessage {
  std::string model_dir;
  EngineConfig config;
};
StartupMessage broadcast_startup(ProcessGroup& group, const StartupMessage& from_rank0);

}  // namespace kestrel
