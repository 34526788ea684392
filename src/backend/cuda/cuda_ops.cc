// CudaBackend ops: the validating entry points. Each checks devices, dtypes and shapes,
// throws kestrel::Error naming the op and the offending tensor, then calls the launcher in
// kernels.h (or the GEMM runner).
#include <cstdint>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/op_checks.h"
#include "core/error.h"

namespace kestrel {
using namespace cuda_ops;  // op_checks.h

void CudaBackend::embedding(const Tensor& ids, const Tensor& table, Tensor& out) {
  const char* op = "embedding";
  check_tensor(op, "ids", ids, DType::kI32, 1);
  check_tensor(op, "table", table, DType::kBF16, 2);
  check_tensor(op, "out", out, DType::kBF16, 2);
  KS_CHECK(out.dim(0) == ids.dim(0) && out.dim(1) == table.dim(1),
           "embedding: out {} must be [{}, {}]", out.shape().str(), ids.dim(0), table.dim(1));
  kernels::gather_rows(table.data(), table.dim(0), table.dim(1) * 2, i32(ids), ids.dim(0),
                       out.data(), stream());
}

void CudaBackend::gather_rows(const Tensor& x, const Tensor& rows, Tensor& out) {
  const char* op = "gather_rows";
  check_tensor(op, "rows", rows, DType::kI32, 1);
  check_tensor(op, "x", x, x.dtype(), 2);
  check_tensor(op, "out", out, x.dtype(), 2);
  KS_CHECK(out.dim(0) == rows.dim(0) && out.dim(1) == x.dim(1),
           "gather_rows: out {} must be [{}, {}]", out.shape().str(), rows.dim(0), x.dim(1));
  kernels::gather_rows(x.data(), x.dim(0), static_cast<size_t>(x.dim(1)) * dtype_size(x.dtype()),
                       i32(rows), rows.dim(0), out.data(), stream());
}

void CudaBackend::rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  const char* op = "rms_norm";
  check_tensor(op, "x", x, DType::kBF16, 2);
  check_tensor(op, "w", w, DType::kBF16, 1);
  check_tensor(op, "out", out, DType::kBF16, 2);
  KS_CHECK(w.dim(0) == x.dim(1) && out.shape() == x.shape() && x.dim(1) > 0,
           "rms_norm: x {}, w {} and out {} disagree", x.shape().str(), w.shape().str(),
           out.shape().str());
  kernels::rms_norm(bf(x), bf(w), eps, x.dim(0), to_int(x.dim(1)), bf_mut(out), stream());
}

void CudaBackend::add_rms_norm(Tensor& x, Tensor& residual, const Tensor& w, float eps) {
  const char* op = "add_rms_norm";
  check_tensor(op, "x", x, DType::kBF16, 2);
  check_tensor(op, "residual", residual, DType::kBF16, 2);
  check_tensor(op, "w", w, DType::kBF16, 1);
  KS_CHECK(residual.shape() == x.shape() && w.dim(0) == x.dim(1) && x.dim(1) > 0,
           "add_rms_norm: x {}, residual {} and w {} disagree", x.shape().str(),
           residual.shape().str(), w.shape().str());
  kernels::add_rms_norm(bf_mut(x), bf_mut(residual), bf(w), eps, x.dim(0), to_int(x.dim(1)),
                        stream());
}

void CudaBackend::linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  const auto [t, n, k] = check_product("linear", x, 1, w, bias, out, true);
  const bool f32_out = out.dtype() == DType::kF32;
  const void* epilogue_bias = bias.defined() && !f32_out ? bias.data() : nullptr;
  gemm_->run(x.data(), w.data(), epilogue_bias, out.data(), f32_out ? CUDA_R_32F : CUDA_R_16BF,
             t, n, k);
  if (bias.defined() && f32_out) {
    kernels::add_bias_f32(static_cast<float*>(out.data()), bf(bias), t, to_int(n), stream());
  }
}

void CudaBackend::silu_mul(const Tensor& x, Tensor& out) {
  const char* op = "silu_mul";
  check_tensor(op, "x", x, DType::kBF16, 2);
  check_tensor(op, "out", out, DType::kBF16, 2);
  KS_CHECK(x.dim(1) % 2 == 0 && out.dim(0) == x.dim(0) && out.dim(1) == x.dim(1) / 2,
           "silu_mul: x {} must be [T, 2I] and out {} [T, I]", x.shape().str(), out.shape().str());
  kernels::silu_mul(bf(x), x.dim(0), to_int(out.dim(1)), bf_mut(out), stream());
}

namespace {

void check_metadata(const char* op, const AttentionMetadata& meta) {
  check_tensor(op, "meta.slot_mapping", meta.slot_mapping, DType::kI32, 1);
  check_tensor(op, "meta.positions", meta.positions, DType::kI32, 1);
  KS_CHECK(meta.num_tokens >= 0 && meta.positions.dim(0) >= meta.num_tokens &&
               meta.slot_mapping.dim(0) >= meta.num_tokens,
           "{}: meta.positions {} / slot_mapping {} shorter than num_tokens {}", op,
           meta.positions.shape().str(), meta.slot_mapping.shape().str(), meta.num_tokens);
}

void check_kv(const char* op, const LayerKvCache& kv, const AttentionShape& shape,
              int block_size, CudaKvLayout layout) {
  check_tensor(op, "kv.k", kv.k, DType::kBF16, 4);
  check_tensor(op, "kv.v", kv.v, DType::kBF16, 4);
  const bool head_major = layout == CudaKvLayout::kHeadMajor;
  const int64_t d1 = head_major ? shape.num_kv_heads : block_size;
  const int64_t d2 = head_major ? block_size : shape.num_kv_heads;
  KS_CHECK(block_size > 0 && kv.k.shape() == kv.v.shape() && kv.k.dim(1) == d1 &&
               kv.k.dim(2) == d2 && kv.k.dim(3) == shape.head_dim,
           "{}: KV cache {} must be [blocks, {}, {}, {}] ({} pages)", op, kv.k.shape().str(), d1,
           d2, shape.head_dim, head_major ? "head-major" : "token-major");
  check_aligned(op, "kv.k", kv.k, 16);
  check_aligned(op, "kv.v", kv.v, 16);
}

void check_heads(const char* op, const AttentionShape& s) {
  KS_CHECK(s.num_q_heads > 0 && s.num_kv_heads > 0 && s.num_q_heads % s.num_kv_heads == 0,
           "{}: {} query heads are not a multiple of {} KV heads", op, s.num_q_heads,
           s.num_kv_heads);
}

}  // namespace

void CudaBackend::qk_norm_rope_store(const Tensor& qkv, const Tensor& q_norm,
                                     const Tensor& k_norm, float eps, const Tensor& cos_sin,
                                     const AttentionShape& shape, const AttentionMetadata& meta,
                                     LayerKvCache& kv, Tensor& q_out) {
  const char* op = "qk_norm_rope_store";
  const int d = shape.head_dim;
  KS_CHECK(d == 16 || d == 32 || d == 64 || d == 128 || d == 256,
           "{}: head_dim {} unsupported (16, 32, 64, 128, 256)", op, d);
  check_heads(op, shape);
  check_tensor(op, "qkv", qkv, DType::kBF16, 2);
  check_tensor(op, "q_out", q_out, DType::kBF16, 2);
  check_tensor(op, "cos_sin", cos_sin, DType::kF32, 2);
  check_metadata(op, meta);
  check_kv(op, kv, shape, meta.block_size, kv_layout_);
  const int64_t t = qkv.dim(0);
  KS_CHECK(t == meta.num_tokens, "{}: qkv has {} rows, meta.num_tokens is {}", op, t,
           meta.num_tokens);
  KS_CHECK(qkv.dim(1) == int64_t(shape.num_q_heads + 2 * shape.num_kv_heads) * d,
           "{}: qkv {} must be [T, (Hq + 2 Hkv) D] = [T, {}]", op, qkv.shape().str(),
           (shape.num_q_heads + 2 * shape.num_kv_heads) * d);
  KS_CHECK(q_out.dim(0) == t && q_out.dim(1) == int64_t(shape.num_q_heads) * d,
           "{}: q_out {} must be [{}, {}]", op, q_out.shape().str(), t, shape.num_q_heads * d);
  KS_CHECK(cos_sin.dim(1) == d && cos_sin.dim(0) > 0, "{}: cos_sin {} must be [max_pos, {}]", op,
           cos_sin.shape().str(), d);
  for (const Tensor* nw : {&q_norm, &k_norm}) {
    if (!nw->defined()) continue;
    check_tensor(op, nw == &q_norm ? "q_norm" : "k_norm", *nw, DType::kBF16, 1);
    KS_CHECK(nw->dim(0) == d, "{}: norm weight {} must be [{}]", op, nw->shape().str(), d);
  }
  check_aligned(op, "qkv", qkv, 16);
  check_aligned(op, "q_out", q_out, 16);

  kernels::QkNormRopeArgs a;
  a.qkv = bf(qkv);
  a.q_norm = q_norm.defined() ? bf(q_norm) : nullptr;
  a.k_norm = k_norm.defined() ? bf(k_norm) : nullptr;
  a.cos_sin = static_cast<const float*>(cos_sin.data());
  a.positions = i32(meta.positions);
  a.slot_mapping = i32(meta.slot_mapping);
  a.q_out = bf_mut(q_out);
  a.k_cache = bf_mut(kv.k);
  a.v_cache = bf_mut(kv.v);
  a.kv_head_major = kv_layout_ == CudaKvLayout::kHeadMajor;
  a.block_size = meta.block_size;
  a.eps = eps;
  a.num_tokens = to_int(t);
  a.num_q_heads = shape.num_q_heads;
  a.num_kv_heads = shape.num_kv_heads;
  a.head_dim = d;
  a.max_pos = to_int(cos_sin.dim(0));
  kernels::qk_norm_rope_store(a, stream());
}

void CudaBackend::attention(const Tensor& q, const LayerKvCache& kv, const AttentionShape& shape,
                            const AttentionMetadata& meta, float scale, Tensor& out) {
  const char* op = "attention";
  const int d = shape.head_dim;
  KS_CHECK(d == 16 || d == 32 || d == 64 || d == 128, "{}: head_dim {} unsupported (16, 32, 64, 128)",
           op, d);
  check_heads(op, shape);
  KS_CHECK(shape.num_q_heads / shape.num_kv_heads <= kernels::kMaxAttentionGroup,
           "{}: {} query heads per KV head, at most {} supported", op,
           shape.num_q_heads / shape.num_kv_heads, kernels::kMaxAttentionGroup);
  check_tensor(op, "q", q, DType::kBF16, 2);
  check_tensor(op, "out", out, DType::kBF16, 2);
  check_kv(op, kv, shape, meta.block_size, kv_layout_);
  check_tensor(op, "meta.query_start_loc", meta.query_start_loc, DType::kI32, 1);
  check_tensor(op, "meta.seq_lens", meta.seq_lens, DType::kI32, 1);
  check_tensor(op, "meta.block_tables", meta.block_tables, DType::kI32, 2);
  const int64_t t = q.dim(0);
  KS_CHECK(t == meta.num_tokens, "{}: q has {} rows, meta.num_tokens is {}", op, t,
           meta.num_tokens);
  KS_CHECK(q.dim(1) == int64_t(shape.num_q_heads) * d && out.shape() == q.shape(),
           "{}: q {} and out {} must be [T, {}]", op, q.shape().str(), out.shape().str(),
           shape.num_q_heads * d);
  const int b = meta.num_seqs;
  KS_CHECK(b >= 0 && meta.query_start_loc.dim(0) >= b + 1 && meta.seq_lens.dim(0) >= b &&
               meta.block_tables.dim(0) >= b,
           "{}: metadata shorter than num_seqs {} (query_start_loc {}, seq_lens {}, "
           "block_tables {})",
           op, b, meta.query_start_loc.shape().str(), meta.seq_lens.shape().str(),
           meta.block_tables.shape().str());
  check_aligned(op, "q", q, 16);
  check_aligned(op, "out", out, 16);

  kernels::PagedAttentionArgs a;
  a.q = bf(q);
  a.k_cache = bf(kv.k);
  a.v_cache = bf(kv.v);
  a.kv_head_major = kv_layout_ == CudaKvLayout::kHeadMajor;
  a.query_start_loc = i32(meta.query_start_loc);
  a.seq_lens = i32(meta.seq_lens);
  a.block_tables = i32(meta.block_tables);
  a.out = bf_mut(out);
  a.scale = scale;
  a.num_tokens = to_int(t);
  a.num_seqs = b;
  a.num_q_heads = shape.num_q_heads;
  a.num_kv_heads = shape.num_kv_heads;
  a.head_dim = d;
  a.block_size = meta.block_size;
  a.max_blocks_per_seq = to_int(meta.block_tables.dim(1));
  a.max_query_len = meta.max_query_len;
  const kernels::AttentionSplit split = kernels::plan_attention_split(a, meta.max_seq_len, num_sms_);
  const size_t workspace_bytes = kernels::attention_workspace_bytes(a, split);
  void* workspace = workspace_bytes > 0 ? scratch(workspace_bytes) : nullptr;
  kernels::paged_attention(a, split, workspace, stream());
}

}  // namespace kestrel
