// Argument checks shared by the CPU ops. Each throws kestrel::Error with a message of the
// form "<op>: <name> ..." so a user can tell which call and which tensor were wrong.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace kestrel::cpu {

// t is defined, lives on the CPU, has dtype `dtype` and rank `ndim`.
void check_tensor(const Tensor& t, const char* op, const char* name, DType dtype, int ndim);
// t.dim(i) == expected; `what` names the size in the message (e.g. "T", "hidden").
void check_dim(const Tensor& t, const char* op, const char* name, int i, int64_t expected,
               const char* what);
// LayerKvCache tensors are F32 or F8_E4M3 [num_blocks, block_size, num_kv_heads, head_dim]
// with the given heads/head_dim, K and V of equal shape and dtype; an fp8 cache also has
// scale and amax F32 [2, num_kv_heads] and clamped I64 [2, num_kv_heads].
void check_kv_cache(const LayerKvCache& kv, const char* op, const AttentionShape& shape);
// Positive head counts, Hq a multiple of Hkv, positive head_dim.
void check_attention_shape(const AttentionShape& shape, const char* op);

// AttentionMetadata after validation: raw pointers into its i32 tensors plus derived
// per-token data. Valid while `meta` is alive.
struct MetadataView {
  int num_tokens = 0;
  int num_seqs = 0;
  int block_size = 0;
  int max_blocks_per_seq = 0;
  const int32_t* positions = nullptr;
  const int32_t* slot_mapping = nullptr;
  const int32_t* query_start_loc = nullptr;
  const int32_t* seq_lens = nullptr;
  const int32_t* block_tables = nullptr;
  // token_seq[t]: the sequence owning token t, or -1 for padding after query_start_loc[B].
  std::vector<int32_t> token_seq;
};

// Validates meta against a cache of num_blocks blocks of meta.block_size slots:
// tensor dtypes and shapes; query_start_loc starts at 0, never decreases and ends at or
// before T (later tokens are padding); 0 <= query_len <= seq_len; every position equals the
// one implied by seq_lens (seq_len - query_len + i); the block table covers each sequence
// and its used entries name existing blocks; slots are -1 or inside the cache.
MetadataView check_metadata(const AttentionMetadata& meta, const char* op, int64_t num_blocks);

}  // namespace kestrel::cpu
