// CudaBackend ops: the validating entry points. Each checks devices, dtypes and shapes,
// throws kestrel::Error naming the op and the offending tensor, then calls the launcher in
// kernels.h (or the GEMM runner). The attention ops are in cuda_attention_ops.cc.
#include <cstdint>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/op_checks.h"
#include "core/error.h"

namespace kestrel {
using namespace cuda_ops;  // op_checks.h

void CudaBackend::embedding(const Tensor& ids, const Tensor& table, Tensor& out) {
  embedding_rows("embedding", ids, table, 0, out);
}

void CudaBackend::embedding_shard(const Tensor& ids, const Tensor& table, int64_t first_id,
                                  Tensor& out) {
  KS_CHECK(first_id >= 0, "embedding_shard: first_id {} is negative", first_id);
  embedding_rows("embedding_shard", ids, table, first_id, out);
}

void CudaBackend::embedding_rows(const char* op, const Tensor& ids, const Tensor& table,
                                 int64_t first_id, Tensor& out) {
  check_tensor(op, "ids", ids, DType::kI32, 1);
  check_tensor(op, "table", table, DType::kBF16, 2);
  check_tensor(op, "out", out, DType::kBF16, 2);
  KS_CHECK(out.dim(0) == ids.dim(0) && out.dim(1) == table.dim(1), "{}: out {} must be [{}, {}]",
           op, out.shape().str(), ids.dim(0), table.dim(1));
  kernels::gather_rows(table.data(), table.dim(0), table.dim(1) * 2, i32(ids), ids.dim(0),
                       out.data(), stream(),
                       feedback_.defined() ? feedback_.data_as<int32_t>() : nullptr, first_id);
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

void CudaBackend::linear_silu_mul(const Tensor& x, const Tensor& w, Tensor& gate_up, Tensor& out) {
  const char* op = "linear_silu_mul";
  const auto [t, n, k] = check_product(op, x, 1, w, Tensor(), gate_up, false);
  check_tensor(op, "out", out, DType::kBF16, 2);
  KS_CHECK(n % 2 == 0 && out.dim(0) == t && out.dim(1) == n / 2,
           "linear_silu_mul: out {} must be [{}, {}] for w {}", out.shape().str(), t, n / 2,
           w.shape().str());
  if (gemm_->run_silu_mul(x.data(), w.data(), out.data(), t, n, k)) return;
  linear(x, w, Tensor(), gate_up);
  silu_mul(gate_up, out);
}

}  // namespace kestrel
