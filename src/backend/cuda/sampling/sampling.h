// Host launchers of the device sampler (the kernel tier; CudaBackend::sample in
// sampling_backend.cc is the validating entry point). Plain C++: no CUDA types beyond the
// stream, so the backend's .cc files can include it.
//
// Semantics are the CPU sampler's (src/sampling, docs/sampling.md) row for row; the
// algorithm and its launch geometry are described in docs/gpu_sampling.md and at the top of
// sampling.cu. Launchers trust their arguments (the entry point validates them), enqueue
// work on `stream` without synchronizing, and check every launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/host_device.h"

namespace kestrel::sampling_kernels {

// Largest number of top logprobs a row may ask for on the device (the engine allows 20).
constexpr int kMaxTopLogprobs = 1024;

// One row's parameters, normalised by the host: top_k is 0 when off (including k >= vocab),
// top_p 1 when off, min_p 0 when off.
struct RowParams {
  float temperature = 0.0f;  // 0 = greedy
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t top_k = 0;
  int32_t num_logprobs = -1;    // -1: none
  int32_t processed_row = -1;   // row of the processed-logits buffer; -1: sample the raw row
  int32_t penalty_begin = 0;    // this row's PenaltyEntry range
  int32_t penalty_end = 0;
  // Row of SampleArgs::masks (structured outputs), or -1. A masked row is a processed row.
  int32_t mask_row = -1;
  // Slot of SampleArgs::feedback holding one more output id of this row (the token the last
  // launch sampled, not yet on the host: pending_token), or -1. Such a row is a processed
  // row; the penalties count the token as they count the row's PenaltyEntry ids.
  int32_t pending_slot = -1;
  uint64_t seed = 0;
  int64_t position = 0;
};

// A plain row needs no candidate selection: greedy, or temperature sampling with top_k, top_p
// and min_p off, and no logprobs. Plain rows take the split path (sampling_plain.cu): many
// blocks per row and one read of the logits.
KS_HOST_DEVICE inline bool is_plain(const RowParams& p) {
  if (p.num_logprobs >= 0) return false;
  return p.temperature == 0.0f || (p.top_k == 0 && p.top_p >= 1.0f && p.min_p <= 0.0f);
}

enum PenaltyFlags : uint32_t {
  kPenaltyRepetition = 1,  // the id occurs in prompt or output: repetition_penalty applies
  kPenaltyMasked = 2,      // forced to -inf (min_tokens)
};

// One distinct token id of a row that the logit processors change. `bias` (logit_bias) is
// added first; then `output_count` > 0 makes the frequency and presence penalties apply.
struct PenaltyEntry {
  int32_t id = 0;
  int32_t output_count = 0;
  uint32_t flags = 0;
  float bias = 0.0f;
};

enum RowStatus : int32_t {
  kRowOk = 0,
  kRowNoFiniteLogit = 1,     // random sampling over a row without a finite logit
  kRowNoFiniteRawLogit = 2,  // logprobs of a row without a finite raw logit
};

struct RowResult {
  int32_t token = 0;
  int32_t status = kRowOk;
  float logprob = 0.0f;  // when num_logprobs >= 0
  int32_t rank = 0;
  int32_t num_top = 0;   // min(num_logprobs, vocab) entries in the row's TopLogprob slots
};

struct TopLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
};

struct SampleArgs {
  const float* logits = nullptr;     // [num_rows, vocab] raw logits
  float* processed = nullptr;        // [num_processed, vocab] scratch for penalised rows
  const RowParams* rows = nullptr;   // [num_rows]
  const PenaltyEntry* penalties = nullptr;
  const int32_t* processed_rows = nullptr;  // [num_processed]: batch row of each processed row
  // [rows with a mask, mask_words]: bit t of word t / 32 set = token t may be sampled;
  // mask_words = ceil(vocab / 32). Null when no row has a mask.
  const uint32_t* masks = nullptr;
  int mask_words = 0;
  RowResult* results = nullptr;      // [num_rows]
  TopLogprob* top = nullptr;         // [num_rows, top_stride]
  int num_rows = 0;
  int num_processed = 0;
  int vocab = 0;
  int top_stride = 0;                // >= every row's min(num_logprobs, vocab)
  // Rows for which is_plain() holds; -1: not counted (both paths are launched, each skipping
  // the other's rows). The split path runs only with plain_scratch set, to
  // plain_scratch_bytes(num_rows, vocab) bytes of device memory (8-byte aligned); without
  // it every row takes the one-block path.
  int num_plain = -1;
  void* plain_scratch = nullptr;
  // With topk_scratch set (topk_scratch_bytes(num_rows, vocab) bytes, 8-byte aligned), the
  // first pass of rows for which takes_topk_split holds (sampling_topk.h) is split over many
  // blocks; num_topk_split counts them (-1: not counted). Null: one block a row throughout.
  int num_topk_split = -1;
  void* topk_scratch = nullptr;
  // The same for top_p / min_p rows without top_k (takes_nucleus_split, sampling_nucleus.h):
  // nucleus_scratch_bytes(num_rows, vocab) bytes.
  int num_nucleus_split = -1;
  void* nucleus_scratch = nullptr;
  // [num_rows] or null: each row's token is also written here (token feedback).
  int32_t* feedback = nullptr;
};

// Logprobs of given tokens (prompt logprobs): per row, step 4 of the sampler alone, with the
// row's "sampled" token set to tokens[row]. results[row].token = tokens[row]; status
// kRowNoFiniteRawLogit for a row without a finite logit.
struct TokenLogprobsArgs {
  const float* logits = nullptr;    // [num_rows, vocab] raw logits
  const int32_t* tokens = nullptr;  // [num_rows], each in [0, vocab)
  RowResult* results = nullptr;     // [num_rows]
  TopLogprob* top = nullptr;        // [num_rows, top_stride]
  int num_rows = 0;
  int vocab = 0;
  int num_top = 0;     // 0 .. kMaxTopLogprobs
  int top_stride = 0;  // >= min(num_top, vocab)
};
void token_logprobs(const TokenLogprobsArgs& args, cudaStream_t stream);

// Device scratch the split path of the plain rows needs (per-chunk statistics).
size_t plain_scratch_bytes(int num_rows, int vocab);

// Copies each processed row from the raw logits, -inf where its allowed-token mask (if any)
// has a clear bit, and applies its PenaltyEntry list (masks, logit bias, repetition,
// frequency and presence penalties, skipping disallowed ids; float arithmetic as the CPU
// sampler's) and its pending output token (sampling_penalties.cu). Nothing when
// args.num_processed is 0; at most 65,535 processed rows.
void launch_penalties(const SampleArgs& args, cudaStream_t stream);

// launch_penalties, then samples every row: plain rows (is_plain) on the split path, the
// others with one block per row.
void sample_rows(const SampleArgs& args, cudaStream_t stream);

}  // namespace kestrel::sampling_kernels
