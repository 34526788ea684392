#include "model/causal_lm.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/rope.h"

namespace kestrel {

std::unique_ptr<CausalLM> CausalLM::load(const std::string& model_dir, Backend& backend,
                                         Communicator* comm) {
  const ModelConfig config = load_model_config(model_dir);
  const WeightStore weights = WeightStore::open(model_dir);
  return load(config, weights, backend, comm);
}

std::unique_ptr<CausalLM> CausalLM::load(const ModelConfig& config, const WeightStore& weights,
                                         Backend& backend, Communicator* comm) {
  const ArchitectureSpec& arch = find_architecture(config.architecture);
  const ShardPlan plan = comm != nullptr ? ShardPlan::make(config, comm->rank(), comm->world_size())
                                         : ShardPlan::make(config, 0, 1);
  std::unique_ptr<CausalLM> m(new CausalLM(config, backend, comm, plan));
  m->cos_sin_ = backend.upload(build_rope_table(rope_frequencies(config)), DType::kF32);
  m->weights_ = load_model_weights(weights, config, arch, backend, plan);
  return m;
}

KvCacheSpec CausalLM::kv_cache_spec(int num_blocks, int block_size, bool fp8) const {
  KvCacheSpec s;
  s.num_layers = config_.num_hidden_layers;
  s.num_blocks = num_blocks;
  s.block_size = block_size;
  s.num_kv_heads = plan_.num_kv_heads;
  s.head_dim = config_.head_dim;
  s.dtype = fp8 ? DType::kF8E4M3 : backend_.compute_dtype();
  return s;
}

Tensor CausalLM::forward(const Tensor& input_ids, const AttentionMetadata& meta,
                         std::vector<LayerKvCache>& kv, const Tensor& sample_rows) {
  const ModelConfig& c = config_;
  KS_CHECK(input_ids.defined() && input_ids.ndim() == 1 && input_ids.dtype() == DType::kI32,
           "forward: input_ids must be i32 [T]");
  KS_CHECK(sample_rows.defined() && sample_rows.ndim() == 1 && sample_rows.dtype() == DType::kI32,
           "forward: sample_rows must be i32 [S]");
  const int64_t T = input_ids.dim(0), S = sample_rows.dim(0);
  KS_CHECK(T > 0, "forward: no tokens");
  KS_CHECK(meta.num_tokens == T, "forward: meta.num_tokens {} != {} input ids", meta.num_tokens, T);
  KS_CHECK(kv.size() == static_cast<size_t>(c.num_hidden_layers),
           "forward: {} KV cache layers for a model of {} layers", kv.size(), c.num_hidden_layers);

  const int64_t D = c.head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const AttentionShape shape{plan_.num_q_heads, plan_.num_kv_heads, static_cast<int>(D)};
  Backend& be = backend_;

  if (T > ws_.max_num_tokens || S > ws_.max_rows) {
    reserve_workspace(std::max(T, ws_.max_num_tokens), std::max(S, ws_.max_rows));
  }
  // Views of the first T (S) rows: the same addresses for every call of the same size.
  Tensor hidden = ws_.hidden.slice(0, T);
  Tensor residual = ws_.residual.slice(0, T);
  Tensor qkv = ws_.qkv.slice(0, T);
  Tensor q = ws_.q.slice(0, T);
  Tensor attn = ws_.attn.slice(0, T);
  Tensor gate_up = ws_.gate_up.slice(0, T);
  Tensor act = ws_.act.slice(0, T);

  if (comm_ == nullptr) {
    be.embedding(input_ids, weights_.embed, residual);
  } else {
    // Each rank embeds the ids of its vocab shard (zeros elsewhere); the sum is the lookup.
    be.embedding_shard(input_ids, weights_.embed, plan_.vocab_start, residual);
    all_reduce(residual);
  }
  last_num_tokens_ = T;
  last_fused_ = T <= be.fused_linear_max_rows() && (comm_ == nullptr || comm_->has_all_reduce_add());
  if (last_fused_) return forward_fused(meta, kv, sample_rows, T, S, eps, scale, shape);
  // Without a communicator all_reduce() does nothing: the single-device sequence.
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& w = weights_.layers[l];
    if (l == 0) {
      be.rms_norm(residual, w.input_norm, eps, hidden);
    } else {
      be.add_rms_norm(hidden, residual, w.input_norm, eps);
    }
    be.linear_qk_norm_rope_attention(hidden, w.qkv, w.qkv_bias, qkv, w.q_norm, w.k_norm, eps,
                                     cos_sin_, shape, meta, kv[l], scale, q, attn);
    be.linear(attn, w.o_proj, w.o_bias, hidden);  // o_bias: rank 0's only
    all_reduce(hidden);
    be.add_rms_norm(hidden, residual, w.post_norm, eps);
    be.linear_silu_mul(hidden, w.gate_up, gate_up, act);
    be.linear(act, w.down, Tensor(), hidden);
    all_reduce(hidden);
  }
  be.add_rms_norm(hidden, residual, weights_.final_norm, eps);

  Tensor sampled = ws_.sampled.slice(0, S);
  be.gather_rows(hidden, sample_rows, sampled);
  return lm_head(sampled, S, nullptr, eps, vocab_parallel_);
}

Tensor CausalLM::row_logits(const Tensor& rows) {
  KS_CHECK(last_num_tokens_ > 0, "row_logits: no forward before it");
  KS_CHECK(rows.defined() && rows.ndim() == 1 && rows.dtype() == DType::kI32,
           "row_logits: rows must be i32 [R]");
  const int64_t R = rows.dim(0);
  KS_CHECK(R > 0 && R <= ws_.max_rows, "row_logits: {} rows (1 to {})", R, ws_.max_rows);
  const float eps = static_cast<float>(config_.rms_norm_eps);
  // The unfused path leaves the normed final rows in hidden; the fused one the residual.
  const Tensor& final_rows = last_fused_ ? ws_.residual : ws_.hidden;
  Tensor sampled = ws_.sampled.slice(0, R);
  backend_.gather_rows(final_rows.slice(0, last_num_tokens_), rows, sampled);
  return lm_head(sampled, R, last_fused_ ? &weights_.final_norm : nullptr, eps);
}

void CausalLM::set_vocab_parallel_logits(bool on) {
  KS_CHECK(!on || (comm_ != nullptr && plan_.world_size > 1),
           "vocab-parallel logits need tensor parallelism over more than one rank");
  vocab_parallel_ = on;
}

Tensor CausalLM::gather_logits(const Tensor& local) {
  KS_CHECK(vocab_parallel_, "gather_logits: the logits are not vocab-parallel");
  KS_CHECK(local.ndim() == 2 && local.dim(1) == plan_.vocab_per_rank && local.dim(0) <= ws_.max_rows &&
               local.data() == ws_.logits_local.data(),
           "gather_logits: {} is not forward()'s vocab-parallel logits", local.shape().str());
  Tensor logits = ws_.logits.slice(0, local.dim(0));
  comm_->all_gather_columns(local, logits);
  return logits;
}

Tensor CausalLM::lm_head(const Tensor& sampled, int64_t S, const Tensor* final_norm, float eps,
                         bool local_only) {
  Tensor logits = ws_.logits.slice(0, S);
  // Under tensor parallelism this rank's vocab columns, then every rank's side by side (the
  // last rank's padding dropped). With one rank the columns are the logits already.
  Tensor local = ws_.logits_local.defined() ? ws_.logits_local.slice(0, S) : logits;
  if (final_norm != nullptr) {
    backend_.norm_linear(sampled, *final_norm, eps, weights_.lm_head, Tensor(), local);
  } else {
    backend_.linear(sampled, weights_.lm_head, Tensor(), local);
  }
  if (local_only) return local;
  if (comm_ != nullptr) comm_->all_gather_columns(local, logits);
  return logits;
}

// The same layers with the fused ops: the residual stream takes each block's output as it
// is produced (linear_add), and every RMSNorm happens inside the product that reads it.
// Under tensor parallelism a rank's o_proj and down products are partial sums, which the
// communicator sums over ranks and adds into the residual in one operation (all_reduce_add);
// every rank's residual is the same.
Tensor CausalLM::forward_fused(const AttentionMetadata& meta, std::vector<LayerKvCache>& kv,
                               const Tensor& sample_rows, int64_t T, int64_t S, float eps,
                               float scale, const AttentionShape& shape) {
  Backend& be = backend_;
  Tensor residual = ws_.residual.slice(0, T);
  Tensor hidden = ws_.hidden.slice(0, T);
  Tensor qkv = ws_.qkv.slice(0, T);
  Tensor q = ws_.q.slice(0, T);
  Tensor attn = ws_.attn.slice(0, T);
  Tensor gate_up = ws_.gate_up.slice(0, T);
  for (int l = 0; l < config_.num_hidden_layers; ++l) {
    const LayerWeights& w = weights_.layers[l];
    be.norm_linear(residual, w.input_norm, eps, w.qkv, w.qkv_bias, qkv);
    be.qk_norm_rope_attention(qkv, w.q_norm, w.k_norm, eps, cos_sin_, shape, meta, kv[l], scale,
                              q, attn);
    if (comm_ == nullptr) {
      be.linear_add(attn, w.o_proj, w.o_bias, residual);
    } else {
      be.linear(attn, w.o_proj, w.o_bias, hidden);  // o_bias: rank 0's only
      comm_->all_reduce_add(hidden, residual);
    }
    be.norm_linear(residual, w.post_norm, eps, w.gate_up, Tensor(), gate_up);
    if (comm_ == nullptr) {
      be.silu_mul_linear_add(gate_up, w.down, residual);
    } else {
      be.silu_mul_linear(gate_up, w.down, hidden);
      comm_->all_reduce_add(hidden, residual);
    }
  }
  Tensor sampled = ws_.sampled.slice(0, S);
  be.gather_rows(residual, sample_rows, sampled);
  return lm_head(sampled, S, &weights_.final_norm, eps, vocab_parallel_);
}

void CausalLM::reserve_workspace(int64_t max_num_tokens, int64_t max_rows) {
  KS_CHECK(max_num_tokens >= 0 && max_rows >= 0, "reserve_workspace: negative size ({}, {})",
           max_num_tokens, max_rows);
  if (max_num_tokens <= ws_.max_num_tokens && max_rows <= ws_.max_rows) return;
  const ModelConfig& c = config_;
  const int64_t T = std::max(max_num_tokens, ws_.max_num_tokens);
  const int64_t S = std::max(max_rows, ws_.max_rows);
  const int64_t H = c.hidden_size, I = plan_.intermediate, D = c.head_dim;
  const int64_t Hq = plan_.num_q_heads, Hkv = plan_.num_kv_heads;
  const DType dt = backend_.compute_dtype();
  Backend& be = backend_;
  ws_ = Workspace();  // free the old buffers first
  ws_.max_num_tokens = T;
  ws_.max_rows = S;
  ws_.hidden = be.empty(dt, {T, H});
  ws_.residual = be.empty(dt, {T, H});
  ws_.qkv = be.empty(dt, {T, (Hq + 2 * Hkv) * D});
  ws_.q = be.empty(dt, {T, Hq * D});
  ws_.attn = be.empty(dt, {T, Hq * D});
  ws_.gate_up = be.empty(dt, {T, 2 * I});
  ws_.act = be.empty(dt, {T, I});
  ws_.sampled = be.empty(dt, {S, H});
  ws_.logits = be.empty(DType::kF32, {S, c.vocab_size});
  if (comm_ != nullptr && plan_.world_size > 1) {
    ws_.logits_local = be.empty(DType::kF32, {S, plan_.vocab_per_rank});
  }
}

size_t CausalLM::workspace_bytes() const {
  size_t n = 0;
  for (const Tensor* t : {&ws_.hidden, &ws_.residual, &ws_.qkv, &ws_.q, &ws_.attn, &ws_.gate_up,
                          &ws_.act, &ws_.sampled, &ws_.logits, &ws_.logits_local}) {
    if (t->defined()) n += t->nbytes();
  }
  return n;
}

}  // namespace kestrel
