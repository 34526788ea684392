// Backend: the operations the model is written against. The CPU backend is the fp32
// reference; the CUDA backend (src/backend/cuda) is the fast one. Both take the same
// tensors and metadata, so a test can run one op on both and compare.
//
// Every op validates shapes and dtypes at entry and throws kestrel::Error on a mismatch.
// Ops may run asynchronously (CUDA stream); synchronize() waits for them.
#pragma once

#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/sampling_batch.h"
#include "core/error.h"
#include "core/tensor.h"
#include "engine/model_executor.h"

namespace kestrel {

// One step's flat batch, in the backend's memory. T tokens from B sequences; sequence b owns
// tokens [query_start_loc[b], query_start_loc[b+1]) whose positions are
// seq_lens[b] - query_len .. seq_lens[b] - 1. Its keys are positions 0 .. seq_lens[b] - 1,
// found through its block table (the new tokens' K/V are written there first).
struct AttentionMetadata {
  int num_tokens = 0;     // T
  int num_seqs = 0;       // B
  int max_query_len = 0;
  int max_seq_len = 0;
  int block_size = 0;
  Tensor positions;        // i32 [T]
  Tensor slot_mapping;     // i32 [T]: block * block_size + offset; -1 = write nothing (padding)
  Tensor query_start_loc;  // i32 [B + 1]
  Tensor seq_lens;         // i32 [B]: context length including this step's tokens
  Tensor block_tables;     // i32 [B, max_blocks_per_seq]; unused entries are 0
  // i32 [B], or undefined: a permutation of [0, B), longest sequence first. A kernel that
  // gives each sequence its own work takes them in this order (CUDA decode attention), so
  // that the longest start first and do not finish alone at the end. Optional.
  Tensor seq_order;
};

struct KvCacheSpec {
  int num_layers = 0;
  int num_blocks = 0;
  int block_size = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  // Storage type of K and V: the backend's compute dtype, or kF8E4M3 (LayerKvCache says how
  // values are scaled into it).
  DType dtype = DType::kF32;
  // Throws kestrel::Error, naming `backend`, when a size is not positive or the dtype is
  // neither `compute` (the backend's) nor kF8E4M3.
  void check(const char* backend, DType compute) const {
    KS_CHECK(dtype == compute || dtype == DType::kF8E4M3,
             "{} backend: the KV cache dtype must be {} or F8_E4M3, got {}", backend,
             dtype_name(compute), dtype_name(dtype));
    KS_CHECK(num_layers > 0 && num_blocks > 0 && block_size > 0 && num_kv_heads > 0 && head_dim > 0,
             "{} backend: every KV cache size must be positive (layers {}, blocks {}, block size "
             "{}, kv heads {}, head_dim {})",
             backend, num_layers, num_blocks, block_size, num_kv_heads, head_dim);
  }
  // Over all layers, K and V.
  size_t bytes_per_block() const {
    return size_t(2) * num_layers * block_size * num_kv_heads * head_dim * dtype_size(dtype);
  }
};

// One layer's K and V pages. The layout belongs to the backend; the CPU backend uses
// [num_blocks, block_size, num_kv_heads, head_dim] for each.
//
// An fp8 cache (k and v of dtype kF8E4M3) stores value x of KV head h as
// e4m3(x / scale[i, h]) (core/fp8.h: round to nearest even, saturating at +-448) and reads
// it back as e4m3 * scale[i, h], with i = 0 for K and 1 for V. Scales are powers of two, so
// both divisions and products are exact and a dequantized value is exact in bf16: the CPU
// and GPU backends read the same numbers. allocate_kv_cache sets every scale to 1; the
// owner changes them (copy_from_host) before anything is stored. The three tensors live on
// the backend's device and stay undefined for a cache of the compute dtype.
struct LayerKvCache {
  Tensor k;
  Tensor v;
  // Default member initializers: {k, v} stays a warning-free aggregate for bf16/f32 caches.
  Tensor scale{};    // f32 [2, num_kv_heads]
  Tensor amax{};     // f32 [2, num_kv_heads]: the largest |x| stored so far (the store keeps it)
  Tensor clamped{};  // i64 [2, num_kv_heads]: values stored so far with |x / scale| > 448
  bool fp8() const { return k.defined() && k.dtype() == DType::kF8E4M3; }
};

struct AttentionShape {
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
};

struct MemoryInfo {
  size_t total = 0;       // device memory
  size_t free = 0;        // free now, as the driver reports it
  size_t peak_bytes = 0;  // most bytes this backend held at once since reset_peak_memory()
};

// A recorded sequence of ops replayed with fixed shapes and addresses (a CUDA graph).
class Graph {
 public:
  virtual ~Graph() = default;
  virtual void replay() = 0;
};

class Communicator;

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  virtual std::string name() const = 0;
  // Element type of activations and of weights after upload (F32 on the CPU, BF16 on CUDA).
  virtual DType compute_dtype() const = 0;

  // Memory.
  virtual Tensor empty(DType dtype, Shape shape) = 0;
  // Copies a host tensor into backend memory, converting float types to `dtype`.
  virtual Tensor upload(const Tensor& host, DType dtype) = 0;
  // Copies a backend tensor to host memory of the same dtype and shape (waits for it).
  virtual Tensor to_host(const Tensor& t) = 0;
  virtual std::vector<LayerKvCache> allocate_kv_cache(const KvCacheSpec& spec) = 0;
  virtual void synchronize() = 0;
  // Device memory, for sizing the KV cache. Zeros where it has no meaning (CPU).
  virtual MemoryInfo memory_info() { return {}; }
  virtual void reset_peak_memory() {}
  // Copies the bytes of host tensor `host` into the existing backend tensor `dst` (same byte
  // size), in stream order: later ops see them, and `host` may be reused once this returns.
  // Lets a caller refill fixed buffers (CUDA graphs) instead of allocating each step.
  virtual void copy_from_host(const Tensor& host, Tensor& dst) {
    KS_CHECK(host.nbytes() == dst.nbytes() && host.device() == Device::kCpu &&
                 dst.device() == Device::kCpu,
             "{} backend: copy_from_host needs host tensors of equal size", name());
    std::memcpy(dst.data(), host.data(), host.nbytes());
  }
  // Copies backend tensor `src` into the existing host tensor `host` (same byte size) and
  // waits for it.
  virtual void copy_to_host(const Tensor& src, Tensor& host) {
    KS_CHECK(host.nbytes() == src.nbytes() && host.device() == Device::kCpu &&
                 src.device() == Device::kCpu,
             "{} backend: copy_to_host needs host tensors of equal size", name());
    std::memcpy(host.data(), src.data(), src.nbytes());
  }
  // Turns an attached profiler's capture on or off (ncu --profile-from-start off), so that a
  // benchmark can profile chosen steps only. No-op where there is none.
  virtual void set_profiler_capture(bool on) {}
  // Device-to-device copy bandwidth in bytes per second (bytes read plus bytes written),
  // measured on a copy of `bytes` bytes; 0 where there is no device memory (CPU).
  virtual double measure_copy_bandwidth(size_t bytes) { return 0.0; }

  // Records the ops `record` issues into a replayable graph; nullptr when the backend has
  // no graphs (the caller then runs the ops eagerly).
  virtual std::unique_ptr<Graph> capture_graph(const std::function<void()>& record) {
    return nullptr;
  }

  // Samples one token per row of logits F32 [S, V] on the device. Only called when
  // supports_sampling(); otherwise the runner samples on the host.
  virtual bool supports_sampling() const { return false; }
  virtual std::vector<SampledToken> sample(const Tensor& logits, const SamplingBatch& batch) {
    throw_error("{} backend: no device sampler", name());
  }
  // sample() in two halves, so that the host can go on while the device works:
  // launch_sample() enqueues it, collect_sample() waits and returns the tokens of the oldest
  // launch not yet collected (at most two outstanding); discard_samples() forgets them all.
  virtual void launch_sample(const Tensor& logits, const SamplingBatch& batch) {
    throw_error("{} backend: no device sampler", name());
  }
  // Optional, before the forward that makes the logits (of `vocab` columns): validates the
  // batch and uploads its parameters, so that the copy overlaps the forward. The next
  // launch_sample() must then get the same batch.
  virtual void stage_sample(const SamplingBatch& batch, int vocab) {}
  virtual std::vector<SampledToken> collect_sample() {
    throw_error("{} backend: no device sampler", name());
  }
  virtual void discard_samples() {}
  // The vocab-parallel sampler of tensor parallelism (docs/parallel.md): samples `batch`
  // (staged with the whole vocabulary, shardable(batch, vocab)) from this rank's LM-head
  // columns, local_logits F32 [S, Vp] holding ids [rank Vp, rank Vp + Vp) (Vp a multiple
  // of 256; the last rank's columns past `vocab` ignored), with two collectives over `comm`.
  // Every rank of comm calls it for the same batch; every rank's token feedback gets the
  // tokens. With `keep` (rank 0) collect_sample() returns them; the other ranks pass false.
  virtual bool supports_vocab_parallel_sampling() const { return false; }
  virtual void launch_sample_vocab_parallel(const Tensor& local_logits, const SamplingBatch& batch,
                                            int vocab, Communicator& comm, bool keep) {
    throw_error("{} backend: no vocab-parallel sampler", name());
  }
  // Log-probabilities of given tokens, one per row of logits F32 [R, V]: row r's entry for
  // tokens[r] as compute_logprobs (src/sampling/logprobs.h) gives it (log_softmax of the raw
  // row, its rank, the num_top most likely). Prompt logprobs, computed where the logits are;
  // only called when supports_sampling() (else the runner computes them on the host). Waits
  // for the results; throws kestrel::Error for a row without a finite logit.
  virtual std::vector<TokenLogprobs> token_logprobs(const Tensor& logits,
                                                    std::span<const int> tokens, int num_top) {
    throw_error("{} backend: no device sampler", name());
  }
  // Token feedback, for steps launched before their inputs are known (the engine's overlap,
  // llm_engine.h): from now on the device sampler also writes row r's token to a device
  // buffer of max_rows slots, and embedding() and embedding_shard() read an id
  // pending_token(r) (< 0) from slot r, the token the last sampling launched wrote there.
  // False when the backend has none: the caller then resolves such ids on the host.
  virtual bool enable_token_feedback(int max_rows) { return false; }
  // Whether sample() and launch_sample(), with token feedback on, take an output id
  // pending_token(r) (< 0) in a SamplingBatch as the token in slot r, so that penalties count
  // the token of a step still in flight. Otherwise the caller settles such steps first.
  virtual bool samples_pending_tokens() const { return false; }
  // The token-feedback buffer, i32 [max_rows]; undefined while feedback is off. Tensor
  // parallelism copies rank 0's into the other ranks' (their steps read pending tokens too).
  virtual Tensor token_feedback_buffer() { return {}; }

  // Ops. Shapes: T tokens, H hidden, V vocab, S sampled rows.

  // out[t] = table[ids[t]]. ids i32 [T], table [V, H], out [T, H]. With token feedback on,
  // an id < 0 is pending_token(r) (see enable_token_feedback).
  virtual void embedding(const Tensor& ids, const Tensor& table, Tensor& out) = 0;
  // The vocab-parallel embedding of one tensor-parallel rank, whose table holds the rows of
  // ids [first_id, first_id + Vp): out[t] = table[ids[t] - first_id] when that row exists,
  // else zeros (another rank holds it; the all-reduce of every rank's out completes the
  // lookup). ids i32 [T], table [Vp, H], out [T, H], first_id >= 0. With token feedback on,
  // an id < 0 is pending_token(r): it is resolved first, then shifted.
  virtual void embedding_shard(const Tensor& ids, const Tensor& table, int64_t first_id,
                               Tensor& out) = 0;
  // out = x / rms(x) * w over the last dim. x, out [T, H]; w [H].
  virtual void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) = 0;
  // residual += x; x = rms_norm(residual) * w. Both [T, H], updated in place.
  virtual void add_rms_norm(Tensor& x, Tensor& residual, const Tensor& w, float eps) = 0;
  // out[T, N] = x[T, K] * w[N, K]^T (+ bias[N] when defined). out may be F32 for logits.
  virtual void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) = 0;
  // x [T, 2I] = [gate | up]; out [T, I] = silu(gate) * up.
  virtual void silu_mul(const Tensor& x, Tensor& out) = 0;
  // out[s] = x[rows[s]]. rows i32 [S].
  virtual void gather_rows(const Tensor& x, const Tensor& rows, Tensor& out) = 0;

  // qkv [T, (Hq + 2 Hkv) D]. Per-head RMSNorm of q and k with q_norm/k_norm [D] when those
  // are defined, then RoPE (neox: rotate halves) with cos_sin F32 [max_pos, D] holding cos in
  // [:, :D/2] and sin in [:, D/2:], at meta.positions. Writes q to q_out [T, Hq D] and k, v
  // into `kv` at meta.slot_mapping.
  virtual void qk_norm_rope_store(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm,
                                  float eps, const Tensor& cos_sin, const AttentionShape& shape,
                                  const AttentionMetadata& meta, LayerKvCache& kv,
                                  Tensor& q_out) = 0;
  // Causal attention of q [T, Hq D] over each sequence's cached keys (see AttentionMetadata),
  // GQA (query head h reads KV head h / (Hq / Hkv)). out [T, Hq D].
  virtual void attention(const Tensor& q, const LayerKvCache& kv, const AttentionShape& shape,
                         const AttentionMetadata& meta, float scale, Tensor& out) = 0;
  // qk_norm_rope_store then attention, with q [T, Hq D] as their scratch: one op so that a
  // backend may do both in one pass (the CUDA backend does, for batches of decodes only).
  virtual void qk_norm_rope_attention(const Tensor& qkv, const Tensor& q_norm,
                                      const Tensor& k_norm, float eps, const Tensor& cos_sin,
                                      const AttentionShape& shape, const AttentionMetadata& meta,
                                      LayerKvCache& kv, float scale, Tensor& q, Tensor& out) {
    qk_norm_rope_store(qkv, q_norm, k_norm, eps, cos_sin, shape, meta, kv, q);
    attention(q, kv, shape, meta, scale, out);
  }

  // out = silu_mul(linear(x, w)): w [2I, K] = [gate; up], out [T, I]. gate_up [T, 2I] is
  // room for the product; a backend that fuses the two (the CUDA backend's prompt-sized
  // steps on Hopper) leaves it unwritten. Same roundings either way.
  virtual void linear_silu_mul(const Tensor& x, const Tensor& w, Tensor& gate_up, Tensor& out) {
    linear(x, w, Tensor(), gate_up);
    silu_mul(gate_up, out);
  }

  // qk_norm_rope_attention on linear(x, w_qkv, bias): qkv [T, (Hq + 2 Hkv) D] is room for
  // the product, which a backend that fuses it with the norm, RoPE and store (the CUDA
  // backend's prompt-sized steps on Hopper) leaves unwritten. Same roundings either way.
  virtual void linear_qk_norm_rope_attention(const Tensor& x, const Tensor& w_qkv,
                                             const Tensor& bias, Tensor& qkv,
                                             const Tensor& q_norm, const Tensor& k_norm,
                                             float eps, const Tensor& cos_sin,
                                             const AttentionShape& shape,
                                             const AttentionMetadata& meta, LayerKvCache& kv,
                                             float scale, Tensor& q, Tensor& out) {
    linear(x, w_qkv, bias, qkv);
    qk_norm_rope_attention(qkv, q_norm, k_norm, eps, cos_sin, shape, meta, kv, scale, q, out);
  }

  // Fused ops for small steps (decode at low batch), where every op reads its weights once
  // and the cost is the number of kernels: each replaces a sequence of the ops above with
  // the same roundings. The model uses them for steps of at most fused_linear_max_rows()
  // tokens (0: never; the default, for backends without them).
  virtual int fused_linear_max_rows() const { return 0; }
  // out = linear(rms_norm(x, norm_w, eps), w, bias). x [T, K], norm_w [K]; x is unchanged.
  virtual void norm_linear(const Tensor& x, const Tensor& norm_w, float eps, const Tensor& w,
                           const Tensor& bias, Tensor& out) {
    throw_error("{} backend: no fused norm_linear", name());
  }
  // residual += linear(x, w, bias), the product rounded to the compute dtype before the add
  // (as linear then add_rms_norm's add do). residual [T, N].
  virtual void linear_add(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& residual) {
    throw_error("{} backend: no fused linear_add", name());
  }
  // residual += linear(silu_mul(gate_up), w): gate_up [T, 2I], w [N, I], residual [T, N].
  virtual void silu_mul_linear_add(const Tensor& gate_up, const Tensor& w, Tensor& residual) {
    throw_error("{} backend: no fused silu_mul_linear_add", name());
  }
  // out = linear(silu_mul(gate_up), w), as silu_mul then linear: a rank's partial down
  // product under tensor parallelism, which the communicator adds into the residual
  // (Communicator::all_reduce_add). gate_up [T, 2I], w [N, I], out [T, N].
  virtual void silu_mul_linear(const Tensor& gate_up, const Tensor& w, Tensor& out) {
    throw_error("{} backend: no fused silu_mul_linear", name());
  }
};

// "cpu", "cuda" or "auto", on GPU `device_index` for CUDA. Throws kestrel::Error if the
// device is unavailable.
std::unique_ptr<Backend> make_backend(const std::string& device, int num_threads,
                                      int device_index = 0);

}  // namespace kestrel
