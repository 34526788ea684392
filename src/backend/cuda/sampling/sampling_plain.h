// The split path of the device sampler for plain rows (is_plain in sampling.h: greedy, or
// temperature sampling without top_k / top_p / min_p / logprobs). Internal to the sampler:
// sample_rows (sampling.cu) calls it; the design is in docs/gpu_sampling.md.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/sampling/sampling.h"

namespace kestrel::sampling_kernels {

// Elements of one chunk: one warp reads a chunk in one go (8 coalesced loads per lane).
constexpr int kPlainChunk = 256;

inline int plain_chunks(int vocab) { return (vocab + kPlainChunk - 1) / kPlainChunk; }

// Samples every plain row of `args` (other rows are left alone) into args.results: a
// chunk-statistics kernel over (row, chunk) and a pick kernel per row. Enqueues on `stream`;
// REQUIRES args.plain_scratch of plain_scratch_bytes(num_rows, vocab) bytes and the
// processed rows already written when a plain row has one.
void launch_plain(const SampleArgs& args, cudaStream_t stream);

}  // namespace kestrel::sampling_kernels
