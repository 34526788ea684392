// The split path of the device sampler for plain rows (is_plain in sampling.h: greedy, or
// temperature sampling without top_k / top_p / min_p / logprobs): sample_rows (sampling.cu)
// calls launch_plain; its vocab-parallel form (tensor parallelism) is below. The design is in
// docs/gpu_sampling.md.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/sampling/sampling.h"

namespace kestrel::sampling_kernels {

// Elements of one chunk: one warp reads a chunk in one go (8 coalesced loads per lane).
constexpr int kPlainChunk = 256;

inline int plain_chunks(int vocab) { return (vocab + kPlainChunk - 1) / kPlainChunk; }

// One chunk's statistics (the split path's step 1): the chunk's max (greedy rows: the value
// of its argmax), the sum of expf((x - max) / T) over it (sampled rows), and its argmax id in
// the row (greedy rows; INT_MAX when every value is NaN). 16 bytes: a vocab-parallel group
// gathers them as 4 floats a chunk.
struct PlainChunkStat {
  double mass;
  float max;
  int arg;
};
static_assert(sizeof(PlainChunkStat) == 16);

// One rank's part of a row under a vocab-parallel LM head: the row's ids
// [rank * chunks * kPlainChunk, + valid) at logits + row * stride. Shards start on chunk
// boundaries (a rank's vocab range a multiple of kPlainChunk), so a shard's chunks are the
// whole row's. The whole row is the shard {0, plain_chunks(vocab), vocab, vocab}.
struct PlainShard {
  int rank = 0;
  int chunks = 0;  // chunks of a rank (every rank's the same)
  int valid = 0;   // this rank's ids that exist (the last rank's may be fewer)
  int stride = 0;  // elements between rows of this rank's logits
};

// The vocab-parallel split path, in three steps with two collectives between them (the
// caller's: src/runtime has the Communicator):
//  1. plain_shard_stats: `args.logits` this rank's [rows, stride] shard; `stats` gets
//     [rows, shard.chunks] PlainChunkStat.
//  2. (all-gather of every rank's stats by columns into [rows, world * shard.chunks]),
//     plain_shard_pick: every rank the same pick over `all_stats`; `owner_tokens[row]` gets the
//     token on the rank that holds it and 0 elsewhere; results[row] the status, token 0.
//  3. (all-reduce sum of owner_tokens), plain_shard_finish: results[row].token and the
//     feedback from the sums.
// The token is the one launch_plain takes on the gathered row, bit for bit: every rank sees
// the same statistics in the same order (the row's chunks, then trailing all-padding ones that
// weigh nothing). REQUIRES every row plain (is_plain), none processed (no penalties or
// masks: args.num_processed 0, num_plain == num_rows); world * chunks * kPlainChunk <= 2^24
// (ids exact in float). Bad shards or rows throw kestrel::Error.
void plain_shard_stats(const SampleArgs& args, const PlainShard& shard, int world,
                       PlainChunkStat* stats, cudaStream_t stream);
void plain_shard_pick(const SampleArgs& args, const PlainShard& shard, int world,
                      const PlainChunkStat* all_stats, float* owner_tokens, cudaStream_t stream);
void plain_shard_finish(const SampleArgs& args, const float* tokens, cudaStream_t stream);

// Samples every plain row of `args` (other rows are left alone) into args.results: a
// chunk-statistics kernel over (row, chunk) and a pick kernel per row. Enqueues on `stream`;
// REQUIRES args.plain_scratch of plain_scratch_bytes(num_rows, vocab) bytes and the
// processed rows already written when a plain row has one.
void launch_plain(const SampleArgs& args, cudaStream_t stream);

}  // namespace kestrel::sampling_kernels
