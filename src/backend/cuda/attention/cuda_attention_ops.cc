// CudaBackend's attention ops: qk_norm_rope_store, attention, and the two as one op
// (qk_norm_rope_attention), which a batch of decodes runs as one kernel. Each validates its
// tensors and throws kestrel::Error naming the op and the offending tensor.
#include <cstdint>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm/gemm.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/op_checks.h"
#include "core/error.h"

namespace kestrel {
using namespace cuda_ops;  // op_checks.h

namespace {

void check_metadata(const char* op, const AttentionMetadata& meta) {
  check_tensor(op, "meta.slot_mapping", meta.slot_mapping, DType::kI32, 1);
  check_tensor(op, "meta.positions", meta.positions, DType::kI32, 1);
  KS_CHECK(meta.num_tokens >= 0 && meta.positions.dim(0) >= meta.num_tokens &&
               meta.slot_mapping.dim(0) >= meta.num_tokens,
           "{}: meta.positions {} / slot_mapping {} shorter than num_tokens {}", op,
           meta.positions.shape().str(), meta.slot_mapping.shape().str(), meta.num_tokens);
}

// The cache's storage and, for fp8, its scale, amax and clamp tensors; returns the KvQuant.
kernels::KvQuant kv_quant(const char* op, const LayerKvCache& kv, const AttentionShape& shape) {
  const DType dtype = kv.fp8() ? DType::kF8E4M3 : DType::kBF16;
  check_tensor(op, "kv.k", kv.k, dtype, 4);
  check_tensor(op, "kv.v", kv.v, dtype, 4);
  kernels::KvQuant q;
  if (!kv.fp8()) return q;
  check_tensor(op, "kv.scale", kv.scale, DType::kF32, 2);
  check_tensor(op, "kv.amax", kv.amax, DType::kF32, 2);
  check_tensor(op, "kv.clamped", kv.clamped, DType::kI64, 2);
  const Shape s{2, shape.num_kv_heads};
  KS_CHECK(kv.scale.shape() == s && kv.amax.shape() == s && kv.clamped.shape() == s,
           "{}: kv.scale {}, kv.amax {} and kv.clamped {} must be [2, {}]", op,
           kv.scale.shape().str(), kv.amax.shape().str(), kv.clamped.shape().str(),
           shape.num_kv_heads);
  q.fp8 = true;
  q.scale = static_cast<const float*>(kv.scale.data());
  q.amax = static_cast<float*>(kv.amax.data());
  q.clamped = static_cast<unsigned long long*>(kv.clamped.data());
  return q;
}

// kv_quant's checks plus the pages' shape in `layout`. Returns the KvQuant, so that an op
// validates its cache once.
kernels::KvQuant check_kv(const char* op, const LayerKvCache& kv, const AttentionShape& shape,
                          int block_size, CudaKvLayout layout) {
  const kernels::KvQuant quant = kv_quant(op, kv, shape);
  const bool head_major = layout == CudaKvLayout::kHeadMajor;
  const int64_t d1 = head_major ? shape.num_kv_heads : block_size;
  const int64_t d2 = head_major ? block_size : shape.num_kv_heads;
  KS_CHECK(block_size > 0 && kv.k.shape() == kv.v.shape() && kv.k.dim(1) == d1 &&
               kv.k.dim(2) == d2 && kv.k.dim(3) == shape.head_dim,
           "{}: KV cache {} must be [blocks, {}, {}, {}] ({} pages)", op, kv.k.shape().str(), d1,
           d2, shape.head_dim, head_major ? "head-major" : "token-major");
  check_aligned(op, "kv.k", kv.k, 16);
  check_aligned(op, "kv.v", kv.v, 16);
  return quant;
}

void check_heads(const char* op, const AttentionShape& s) {
  KS_CHECK(s.num_q_heads > 0 && s.num_kv_heads > 0 && s.num_q_heads % s.num_kv_heads == 0,
           "{}: {} query heads are not a multiple of {} KV heads", op, s.num_q_heads,
           s.num_kv_heads);
}

// qk_norm_rope_store's checks and launcher arguments.
kernels::QkNormRopeArgs rope_args(const char* op, const Tensor& qkv, const Tensor& q_norm,
                                  const Tensor& k_norm, float eps, const Tensor& cos_sin,
                                  const AttentionShape& shape, const AttentionMetadata& meta,
                                  LayerKvCache& kv, Tensor& q_out, CudaKvLayout layout) {
  const int d = shape.head_dim;
  KS_CHECK(d == 16 || d == 32 || d == 64 || d == 128 || d == 256,
           "{}: head_dim {} unsupported (16, 32, 64, 128, 256)", op, d);
  check_heads(op, shape);
  check_tensor(op, "qkv", qkv, DType::kBF16, 2);
  check_tensor(op, "q_out", q_out, DType::kBF16, 2);
  check_tensor(op, "cos_sin", cos_sin, DType::kF32, 2);
  check_metadata(op, meta);
  const kernels::KvQuant quant = check_kv(op, kv, shape, meta.block_size, layout);
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
    check_aligned(op, nw == &q_norm ? "q_norm" : "k_norm", *nw, 16);  // read 8 dims at a time
  }
  check_aligned(op, "qkv", qkv, 16);
  check_aligned(op, "q_out", q_out, 16);
  check_aligned(op, "cos_sin", cos_sin, 16);

  kernels::QkNormRopeArgs a;
  a.qkv = bf(qkv);
  a.q_norm = q_norm.defined() ? bf(q_norm) : nullptr;
  a.k_norm = k_norm.defined() ? bf(k_norm) : nullptr;
  a.cos_sin = static_cast<const float*>(cos_sin.data());
  a.positions = i32(meta.positions);
  a.slot_mapping = i32(meta.slot_mapping);
  a.q_out = bf_mut(q_out);
  a.k_cache = kv.k.data();
  a.v_cache = kv.v.data();
  a.kv = quant;
  a.kv_head_major = layout == CudaKvLayout::kHeadMajor;
  a.block_size = meta.block_size;
  a.eps = eps;
  a.num_tokens = to_int(t);
  a.num_q_heads = shape.num_q_heads;
  a.num_kv_heads = shape.num_kv_heads;
  a.head_dim = d;
  a.max_pos = to_int(cos_sin.dim(0));
  return a;
}

// attention's checks and launcher arguments.
kernels::PagedAttentionArgs attention_args(const char* op, const Tensor& q, const LayerKvCache& kv,
                                           const AttentionShape& shape,
                                           const AttentionMetadata& meta, float scale,
                                           Tensor& out, CudaKvLayout layout) {
  const int d = shape.head_dim;
  KS_CHECK(d == 16 || d == 32 || d == 64 || d == 128, "{}: head_dim {} unsupported (16, 32, 64, 128)",
           op, d);
  check_heads(op, shape);
  KS_CHECK(shape.num_q_heads / shape.num_kv_heads <= kernels::kMaxAttentionGroup,
           "{}: {} query heads per KV head, at most {} supported", op,
           shape.num_q_heads / shape.num_kv_heads, kernels::kMaxAttentionGroup);
  check_tensor(op, "q", q, DType::kBF16, 2);
  check_tensor(op, "out", out, DType::kBF16, 2);
  const kernels::KvQuant quant = check_kv(op, kv, shape, meta.block_size, layout);
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
  if (meta.seq_order.defined()) {
    check_tensor(op, "meta.seq_order", meta.seq_order, DType::kI32, 1);
    KS_CHECK(meta.seq_order.dim(0) >= b, "{}: meta.seq_order {} shorter than num_seqs {}", op,
             meta.seq_order.shape().str(), b);
  }

  kernels::PagedAttentionArgs a;
  a.q = bf(q);
  a.k_cache = kv.k.data();
  a.v_cache = kv.v.data();
  a.kv = quant;
  a.kv_head_major = layout == CudaKvLayout::kHeadMajor;
  a.query_start_loc = i32(meta.query_start_loc);
  a.seq_lens = i32(meta.seq_lens);
  a.block_tables = i32(meta.block_tables);
  a.seq_order = meta.seq_order.defined() ? i32(meta.seq_order) : nullptr;
  a.out = bf_mut(out);
  a.scale = scale;
  a.num_tokens = to_int(t);
  a.num_seqs = b;
  a.num_q_heads = shape.num_q_heads;
  a.num_kv_heads = shape.num_kv_heads;
  a.head_dim = d;
  a.block_size = meta.block_size;
  a.num_blocks = to_int(kv.k.dim(0));
  a.max_blocks_per_seq = to_int(meta.block_tables.dim(1));
  a.max_query_len = meta.max_query_len;
  return a;
}

}  // namespace

void CudaBackend::qk_norm_rope_store(const Tensor& qkv, const Tensor& q_norm,
                                     const Tensor& k_norm, float eps, const Tensor& cos_sin,
                                     const AttentionShape& shape, const AttentionMetadata& meta,
                                     LayerKvCache& kv, Tensor& q_out) {
  kernels::qk_norm_rope_store(rope_args("qk_norm_rope_store", qkv, q_norm, k_norm, eps, cos_sin,
                                        shape, meta, kv, q_out, kv_layout_),
                              stream());
}

void CudaBackend::attention(const Tensor& q, const LayerKvCache& kv, const AttentionShape& shape,
                            const AttentionMetadata& meta, float scale, Tensor& out) {
  run_attention(attention_args("attention", q, kv, shape, meta, scale, out, kv_layout_), nullptr,
                meta.max_seq_len);
}

void CudaBackend::qk_norm_rope_attention(const Tensor& qkv, const Tensor& q_norm,
                                         const Tensor& k_norm, float eps, const Tensor& cos_sin,
                                         const AttentionShape& shape,
                                         const AttentionMetadata& meta, LayerKvCache& kv,
                                         float scale, Tensor& q, Tensor& out) {
  const char* op = "qk_norm_rope_attention";
  run_rope_attention(rope_args(op, qkv, q_norm, k_norm, eps, cos_sin, shape, meta, kv, q, kv_layout_),
                     attention_args(op, q, kv, shape, meta, scale, out, kv_layout_),
                     meta.max_seq_len);
}

void CudaBackend::run_rope_attention(const kernels::QkNormRopeArgs& r,
                                     const kernels::PagedAttentionArgs& a, int max_seq_len) {
  if (!kernels::attention_rope_supported(a)) {
    kernels::qk_norm_rope_store(r, stream());
    run_attention(a, nullptr, max_seq_len);
    return;
  }
  run_attention(a, &r, max_seq_len);
}

void CudaBackend::linear_qk_norm_rope_attention(const Tensor& x, const Tensor& w_qkv,
                                                const Tensor& bias, Tensor& qkv,
                                                const Tensor& q_norm, const Tensor& k_norm,
                                                float eps, const Tensor& cos_sin,
                                                const AttentionShape& shape,
                                                const AttentionMetadata& meta, LayerKvCache& kv,
                                                float scale, Tensor& q, Tensor& out) {
  const char* op = "linear_qk_norm_rope_attention";
  const auto [t, n, k] = check_product(op, x, 1, w_qkv, bias, qkv, false);
  kernels::QkNormRopeArgs r =
      rope_args(op, qkv, q_norm, k_norm, eps, cos_sin, shape, meta, kv, q, kv_layout_);
  const kernels::PagedAttentionArgs a = attention_args(op, q, kv, shape, meta, scale, out, kv_layout_);
  if (!bias.defined() && gemm_->prompt_kernel() == GemmRunner::PromptKernel::kQkvRope &&
      t >= GemmRunner::kPromptKernelMinTokens) {
    r.cos_sin_bf16 = cos_sin_bf16(cos_sin);
    if (r.cos_sin_bf16 != nullptr && gemm_->run_qkv_rope(x.data(), w_qkv.data(), t, n, k, r)) {
      run_attention(a, nullptr, meta.max_seq_len);
      return;
    }
  }
  linear(x, w_qkv, bias, qkv);
  run_rope_attention(r, a, meta.max_seq_len);
}

const kernels::bf16* CudaBackend::cos_sin_bf16(const Tensor& cos_sin) {
  if (cos_sin.data() != cos_sin_bf16_of_ || cos_sin_bf16_.numel() != cos_sin.numel()) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    KS_CUDA_CHECK(cudaStreamIsCapturing(stream(), &status));
    if (status != cudaStreamCaptureStatusNone) return nullptr;
    cos_sin_bf16_ = empty(DType::kBF16, cos_sin.shape());
    kernels::round_to_bf16(static_cast<const float*>(cos_sin.data()), cos_sin.numel(),
                           bf_mut(cos_sin_bf16_), stream());
    cos_sin_bf16_of_ = cos_sin.data();
  }
  return bf(cos_sin_bf16_);
}

void CudaBackend::run_attention(kernels::PagedAttentionArgs a, const kernels::QkNormRopeArgs* rope,
                                int max_seq_len) {
  a.split_counters = static_cast<int*>(split_counters_.data());
  const kernels::AttentionSplit split = kernels::plan_attention_split(
      a, max_seq_len, num_sms_, kernels::decode_kernel_ctas_per_sm(a, rope != nullptr));
  const size_t workspace_bytes = kernels::attention_workspace_bytes(a, split);
  void* workspace = workspace_bytes > 0 ? scratch(workspace_bytes) : nullptr;
  if (rope != nullptr) {
    kernels::paged_attention_rope(a, *rope, split, workspace, stream());
  } else {
    kernels::paged_attention(a, split, workspace, stream());
  }
}

}  // namespace kestrel
