// CausalLM: a decoder-only language model (Qwen3, Qwen2, Llama; see architecture.h) written
// once against the Backend interface.
//
// One forward call runs one engine step: a flat batch of T new tokens from any number of
// sequences (prompt chunks and decodes mixed, see AttentionMetadata), writes their K/V into
// the paged cache and returns logits for the rows asked for.
//
// Per layer: RMSNorm (fused with the residual add after the first layer), one QKV GEMM
// (+bias), per-head q/k RMSNorm (Qwen3) + RoPE + KV store, paged attention with scale
// 1/sqrt(head_dim), o_proj, residual add + RMSNorm, one gate_up GEMM, SiLU-mul, down_proj.
// Then the final norm, the sampled rows, and the LM head in F32.
//
// Tensor parallelism (load() with a Communicator): the model is one rank's shard, cut as
// ShardPlan says (attention heads, MLP width and vocabulary split over the ranks). Every
// rank runs the same forward on the same batch with its local head counts; the embedding,
// o_proj and down_proj leave partial sums that the communicator all-reduces, and the
// LM head's vocab columns are gathered so that every rank returns the whole logits. Steps
// small enough for the backend's fused ops take them under tensor parallelism too, where the
// communicator adds each partial sum into the residual as it reduces it (all_reduce_add).
//
// Activations live in a workspace the model keeps between calls (reserve_workspace()), so a
// forward allocates nothing once the workspace is large enough: every call of the same size
// uses the same addresses, which is what CUDA graph capture needs.
//
// Thread safety: forward() uses the backend, so one call at a time per backend.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "model/architecture.h"
#include "model/model_weights.h"
#include "model/shard_plan.h"
#include "parallel/communicator.h"

namespace kestrel {

class CausalLM {
 public:
  // Reads <model_dir>/config.json and its safetensors, uploads the weights to `backend`
  // (which must outlive the model) and builds the RoPE table. Throws kestrel::Error for an
  // unsupported architecture or rope type, a missing tensor or a shape mismatch.
  //
  // comm == nullptr: the whole model on one device. Otherwise this rank's shard
  // (ShardPlan::make(config, comm->rank(), comm->world_size()), which throws when the model
  // cannot be split that way), and forward() runs the collectives on `comm`, even at world
  // size 1. `comm` must be made for `backend` and outlive the model; every rank must make
  // the same calls (forward, reserve_workspace) in the same order with the same shapes.
  static std::unique_ptr<CausalLM> load(const std::string& model_dir, Backend& backend,
                                        Communicator* comm = nullptr);
  // The same from an already parsed config and opened weights (tests, tools).
  static std::unique_ptr<CausalLM> load(const ModelConfig& config, const WeightStore& weights,
                                        Backend& backend, Communicator* comm = nullptr);

  const ModelConfig& config() const { return config_; }
  // What this rank holds (the one-rank plan without a communicator).
  const ShardPlan& shard_plan() const { return plan_; }
  // Positions the RoPE table covers (0 .. max_positions() - 1); a token at a later position
  // is rejected by forward().
  int64_t max_positions() const { return cos_sin_.dim(0); }

  // Cache geometry for this model (this rank's KV heads) in the backend's compute dtype, or
  // F8_E4M3 when `fp8` (whose scales the owner sets, runtime/kv_scales.h); pass to
  // Backend::allocate_kv_cache.
  KvCacheSpec kv_cache_spec(int num_blocks, int block_size, bool fp8 = false) const;

  // input_ids i32 [T] and meta in backend memory (meta.num_tokens == T); kv from
  // allocate_kv_cache(kv_cache_spec(..)), one entry per layer; sample_rows i32 [S] with
  // values in [0, T). Returns logits F32 [S, vocab_size] in backend memory (under tensor
  // parallelism the whole vocabulary, the same on every rank): a view of the
  // workspace, valid until the next forward() or reserve_workspace(). Grows the workspace
  // when T or S exceed it (new addresses: graphs captured before then are invalid). Throws
  // kestrel::Error for inconsistent arguments (the backend ops validate the rest).
  Tensor forward(const Tensor& input_ids, const AttentionMetadata& meta,
                 std::vector<LayerKvCache>& kv, const Tensor& sample_rows);
  // After forward(): logits F32 [R, vocab_size] of `rows` (i32 [R], token rows of that
  // forward, R <= the workspace's max_rows), as forward() gives its sampled rows', from the
  // final hidden states it left in the workspace (prompt logprobs). Overwrites the logits
  // forward() returned; under tensor parallelism a collective, like forward(). Throws
  // kestrel::Error without a forward before it or for R out of range.
  Tensor row_logits(const Tensor& rows);

  // Vocab-parallel logits (tensor parallelism over more than one rank): from now on forward()
  // returns this rank's LM-head columns, F32 [S, Vp] (ids [shard_plan().vocab_start, + Vp);
  // the last rank's columns past the vocabulary hold 0), and gather_logits() makes the whole
  // rows where a step needs them. row_logits() still gathers. Set before graphs are captured.
  void set_vocab_parallel_logits(bool on);
  bool vocab_parallel_logits() const { return vocab_parallel_; }
  // The whole logits F32 [S, vocab_size] of forward()'s columns `local` (a collective: every
  // rank calls it). REQUIRES vocab_parallel_logits(); valid as forward()'s result.
  Tensor gather_logits(const Tensor& local);

  // Makes the workspace hold at least `max_num_tokens` tokens and `max_rows` sampled rows; never
  // shrinks it. Call with the largest step before capturing graphs.
  void reserve_workspace(int64_t max_num_tokens, int64_t max_rows);
  // Backend bytes the workspace holds now.
  size_t workspace_bytes() const;

  // Bytes of this rank's weights in backend memory (the RoPE table not included).
  size_t weight_bytes() const { return weights_.bytes; }

 private:
  CausalLM(const ModelConfig& config, Backend& backend, Communicator* comm, const ShardPlan& plan)
      : config_(config), backend_(backend), comm_(comm), plan_(plan) {}

  // Completes a partial sum across the ranks; nothing without a communicator.
  void all_reduce(Tensor& t) {
    if (comm_ != nullptr) comm_->all_reduce_sum(t);
  }

  // forward() after the embedding, with the backend's fused ops (steps of at most
  // fused_linear_max_rows() tokens).
  Tensor forward_fused(const AttentionMetadata& meta, std::vector<LayerKvCache>& kv,
                       const Tensor& sample_rows, int64_t T, int64_t S, float eps, float scale,
                       const AttentionShape& shape);

  // The logits of the sampled rows [S, H] (final_norm applied first when given: the fused
  // path's rows are not normed yet), gathered over the ranks' vocab shards unless
  // `local_only` (this rank's columns).
  Tensor lm_head(const Tensor& sampled, int64_t S, const Tensor* final_norm, float eps,
                 bool local_only = false);

  // Activation buffers for up to max_num_tokens tokens and max_rows sampled rows. Head counts
  // and I are this rank's (ShardPlan); Vp its vocabulary rows.
  struct Workspace {
    int64_t max_num_tokens = 0, max_rows = 0;
    Tensor hidden, residual;  // [T, H]
    Tensor qkv;               // [T, (Hq + 2 Hkv) D]
    Tensor q, attn;           // [T, Hq D]
    Tensor gate_up;           // [T, 2I]
    Tensor act;               // [T, I]
    Tensor sampled;           // [S, H]
    Tensor logits;            // F32 [S, V]
    // F32 [S, Vp]: this rank's LM head columns before the gather. Only with a communicator
    // of more than one rank (one rank's gather is from logits into itself).
    Tensor logits_local;
  };

  ModelConfig config_;
  Backend& backend_;
  Communicator* comm_;  // null: the whole model, no collectives
  bool vocab_parallel_ = false;  // forward() returns this rank's LM-head columns
  ShardPlan plan_;
  ModelWeights weights_;
  Tensor cos_sin_;  // F32 [max_positions, head_dim]
  Workspace ws_;
  // What the last forward() left for row_logits(): its token count (0: none yet) and
  // whether it ran the fused path (whose final rows are the residual, not yet normed).
  int64_t last_num_tokens_ = 0;
  bool last_fused_ = false;
};

}  // namespace kestrel
