// Host launchers of the CUDA backend's kernels (the middle of three tiers: kernel, launcher,
// validating entry point in cuda_backend.cc). Launchers take raw device pointers and a
// stream, trust their arguments (the entry points validate them), enqueue work without
// synchronizing, and check the launch with KS_CUDA_CHECK_LAUNCH.
//
// Element types: bf16 is __nv_bfloat16; every float computation is done in fp32. Where a
// kernel rounds an intermediate to bf16 it is because Hugging Face's bf16 model rounds
// there too (parity with the reference implementation, not extra precision, is the goal).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kestrel::kernels {

using bf16 = __nv_bfloat16;

// out[i] = table[rows[i] - row_offset] for i < num_rows, each row `row_bytes` bytes. Rows
// that fall outside [0, num_table_rows) after the shift produce zeros (never an
// out-of-bounds read). Used for the embedding lookup (row_offset: the first id of a
// tensor-parallel rank's vocab shard) and gather_rows. With `pending` (token feedback), a
// row r < 0 is first replaced by pending[-1 - r], and then shifted.
void gather_rows(const void* table, int64_t num_table_rows, size_t row_bytes, const int32_t* rows,
                 int64_t num_rows, void* out, cudaStream_t stream, const int32_t* pending = nullptr,
                 int64_t row_offset = 0);

// out[t] = bf16(w * bf16(x[t] / rms(x[t]))) over rows of h elements.
void rms_norm(const bf16* x, const bf16* w, float eps, int64_t rows, int h, bf16* out,
              cudaStream_t stream);
// residual[t] = bf16(x[t] + residual[t]); x[t] = rms_norm(residual[t]) * w. In place.
void add_rms_norm(bf16* x, bf16* residual, const bf16* w, float eps, int64_t rows, int h,
                  cudaStream_t stream);

// x [rows, 2 inter] = [gate | up]; out [rows, inter] = bf16(bf16(silu(gate)) * up).
void silu_mul(const bf16* x, int64_t rows, int inter, bf16* out, cudaStream_t stream);

// out[t, n] += bias[n] for an fp32 out [rows, n].
void add_bias_f32(float* out, const bf16* bias, int64_t rows, int n, cudaStream_t stream);

// dst[i] = bf16(dst[i] + src[i]) for i < n.
void add_into(bf16* dst, const bf16* src, int64_t n, cudaStream_t stream);

// out[i] = bf16(in[i]) for i < n (round to nearest even).
void round_to_bf16(const float* in, int64_t n, bf16* out, cudaStream_t stream);

// An fp8 KV cache (backend.h, LayerKvCache): K/V rows hold e4m3 bytes, value = byte x scale,
// scales f32 [2, Hkv] (K then V), powers of two. Kernels taking a cache get it as bytes
// (`void*`) and read `kv_fp8` to know which of the two it is.
struct KvQuant {
  bool fp8 = false;
  const float* scale = nullptr;           // [2, Hkv]
  float* amax = nullptr;                  // [2, Hkv]: the store raises it to the largest |x|
  unsigned long long* clamped = nullptr;  // [2, Hkv]: the store counts |x / scale| > 448
};

struct QkNormRopeArgs {
  const bf16* qkv = nullptr;        // [T, (Hq + 2 Hkv) D]
  const bf16* q_norm = nullptr;     // [D] or null (no q norm)
  const bf16* k_norm = nullptr;     // [D] or null (no k norm)
  const float* cos_sin = nullptr;   // [max_pos, D]: cos in [:, :D/2], sin in [:, D/2:]
  const bf16* cos_sin_bf16 = nullptr;  // the same rounded to bf16, or null (gemm_ws_rope's)
  const int32_t* positions = nullptr;     // [T], clamped to [0, max_pos)
  const int32_t* slot_mapping = nullptr;  // [T], -1 = do not store
  bf16* q_out = nullptr;            // [T, Hq D]
  void* k_cache = nullptr;          // one layer's pages (bf16 or e4m3: kv), layout per kv_head_major
  void* v_cache = nullptr;
  KvQuant kv;
  bool kv_head_major = false;       // see kv_layout.cuh
  int block_size = 0;
  float eps = 1e-6f;
  int num_tokens = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;                 // 16, 32, 64, 128 or 256
  int max_pos = 0;
};
void qk_norm_rope_store(const QkNormRopeArgs& args, cudaStream_t stream);

struct PagedAttentionArgs {
  const bf16* q = nullptr;                 // [T, Hq D]
  const void* k_cache = nullptr;           // one layer's pages (bf16 or e4m3: kv), layout per kv_head_major
  const void* v_cache = nullptr;
  KvQuant kv;                              // amax and clamped unused (no store)
  bool kv_head_major = false;              // see kv_layout.cuh
  const int32_t* query_start_loc = nullptr;  // [B + 1]
  const int32_t* seq_lens = nullptr;         // [B]
  const int32_t* block_tables = nullptr;     // [B, max_blocks_per_seq]
  const int32_t* seq_order = nullptr;        // [B] permutation (decode kernel's CTA order) or null
  bf16* out = nullptr;                     // [T, Hq D]
  float scale = 1.0f;
  int num_tokens = 0;
  int num_seqs = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;                        // 16, 32, 64 or 128
  int block_size = 0;
  int num_blocks = 0;                      // pages in each cache (the TMA maps' extent)
  int max_blocks_per_seq = 0;
  int max_query_len = 0;                   // host-side; 1 (all decodes) allows the decode kernel
  // Zeroed device counters, left zeroed: at least kMaxSplitCounters ints. Split decode CTAs
  // count themselves in, and the last of each (sequence, KV head, part) merges the partials,
  // so no merge kernel runs. Needed only when the decode kernel splits keys.
  int* split_counters = nullptr;
};
constexpr int kMaxSplitCounters = 4096;
// Most key splits a plan makes (AttentionSplit::num_splits).
constexpr int kMaxAttentionSplits = 32;
// Largest GQA group (query heads per KV head) paged_attention supports.
constexpr int kMaxAttentionGroup = 16;

// How the keys of one (sequence, KV head, query tile) are shared out (Flash-Decoding): with
// num_splits > 1, the tile's n keys are cut into chunks of c = max(kv_chunk, n / num_splits
// rounded up to whole 32-key tiles) keys, CTA z takes keys [z c, (z + 1) c) (the last one
// takes the rest; CTAs past the end take none), writes fp32 partials, and a second kernel
// (in the decode kernel: the last CTA of each head group) merges them. Chosen when the batch
// alone cannot fill the GPU. Because c follows each tile's own length, a plan made for a
// longer max_seq_len stays right (and efficient) for shorter sequences: one captured graph
// serves every context length.
//
// Decode batches of several CTA waves are not split that way (most z-splits of short
// sequences would find no keys and still take a CTA slot); instead, with tail_seqs > 0
// (decode kernel only; num_splits == 2), the first tail_seqs sequences of args.seq_order (the
// longest, when the order is longest first) are cut in two halves that take two CTAs next to
// each other, and the rest are whole: a wave then ends on halves, not on lone long sequences.
struct AttentionSplit {
  int num_splits = 1;
  int kv_chunk = 0;  // smallest chunk (general kernel: a multiple of 32 keys)
  int tail_seqs = 0;
};
// max_seq_len: the batch's longest sequence (host-side metadata); num_sms: the device's;
// decode_ctas_per_sm: how many decode-kernel CTAs an SM holds (decode_kernel_ctas_per_sm),
// 0 for the design value of 6.
AttentionSplit plan_attention_split(const PagedAttentionArgs& args, int max_seq_len, int num_sms,
                                    int decode_ctas_per_sm = 0);
// CTAs of the decode kernel (rope: the fused one) for `args` resident per SM, from the
// compiled kernel's registers and shared memory (queried once per kernel).
int decode_kernel_ctas_per_sm(const PagedAttentionArgs& args, bool rope);
// Device workspace paged_attention needs for `split` (0 when it is not split).
size_t attention_workspace_bytes(const PagedAttentionArgs& args, const AttentionSplit& split);
// `workspace`: at least attention_workspace_bytes() of device memory, 16-byte aligned.
void paged_attention(const PagedAttentionArgs& args, const AttentionSplit& split, void* workspace,
                     cudaStream_t stream);

// True when paged_attention_rope takes `args`: a pure decode batch (max_query_len 1, one
// token per sequence, each the last of its sequence) that a decode kernel serves (the
// CUDA-core one, or the tensor-core one for fp8 caches and bf16 batches of 9+ sequences at
// head dims 64/128 unless KESTREL_DECODE_MMA_ROPE is 0).
bool attention_rope_supported(const PagedAttentionArgs& args);
// qk_norm_rope_store(rope) then paged_attention(args) in one kernel (the tensor-core one's
// split partials then go through the merge kernel), for a pure decode batch:
// q, k and v come from rope.qkv (args.q and rope.q_out are not used); each sequence's new K/V
// go to rope.k_cache / rope.v_cache (args' caches) at rope.slot_mapping. The keys before
// each sequence's new one are loaded before the previous kernel has finished (launch.cuh):
// no kernel of the last two launches may have written them.
// REQUIRES: attention_rope_supported(args); rope and args describe the same batch and layer.
void paged_attention_rope(const PagedAttentionArgs& args, const QkNormRopeArgs& rope,
                          const AttentionSplit& split, void* workspace, cudaStream_t stream);

}  // namespace kestrel::kernels
