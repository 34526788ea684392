// CudaBackend's fused ops for small steps (backend.h): norm_linear, linear_add,
// silu_mul_linear_add and silu_mul_linear, each one fused_gemv kernel (gemv_fused.h) where it takes the shapes,
// else the unfused ops through a scratch buffer (same results, more kernels).
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/gemm/gemv_fused.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/op_checks.h"
#include "core/error.h"

namespace kestrel {
using namespace cuda_ops;  // op_checks.h

namespace {

// KESTREL_FUSED=0 turns the fused path off; KESTREL_FUSED_MAX_ROWS=N limits it to steps of at
// most N tokens (both for comparisons).
int fused_max_rows() {
  static const int rows = [] {
    const char* off = std::getenv("KESTREL_FUSED");
    if (off != nullptr && std::strcmp(off, "0") == 0) return 0;
    const char* max_rows = std::getenv("KESTREL_FUSED_MAX_ROWS");
    if (max_rows == nullptr) return kernels::kFusedGemvMaxTokens;
    return std::clamp(std::atoi(max_rows), 0, kernels::kFusedGemvMaxTokens);
  }();
  return rows;
}

const void* data_or_null(const Tensor& t) { return t.defined() ? t.data() : nullptr; }

}  // namespace

int CudaBackend::fused_linear_max_rows() const {
  return fused_max_rows();
}

void CudaBackend::norm_linear(const Tensor& x, const Tensor& norm_w, float eps, const Tensor& w,
                              const Tensor& bias, Tensor& out) {
  const char* op = "norm_linear";
  const Dims d = check_product(op, x, 1, w, bias, out, true);
  check_tensor(op, "norm_w", norm_w, DType::kBF16, 1);
  KS_CHECK(norm_w.dim(0) == d.k, "norm_linear: norm_w {} must be [{}]", norm_w.shape().str(), d.k);
  kernels::GemvFusion f;
  f.prologue = kernels::GemvPrologue::kRmsNorm;
  f.norm_w = norm_w.data();
  f.eps = eps;
  if (kernels::fused_gemv_supported(d.t, d.n, d.k, x.data(), w.data(), f)) {
    kernels::fused_gemv(x.data(), w.data(), data_or_null(bias), out.data(),
                        out.dtype() == DType::kF32, d.t, d.n, d.k, f, num_sms_, stream());
    return;
  }
  Tensor normed(scratch(x.nbytes()), DType::kBF16, x.shape(), Device::kCuda);
  rms_norm(x, norm_w, eps, normed);
  linear(normed, w, bias, out);
}

void CudaBackend::linear_add(const Tensor& x, const Tensor& w, const Tensor& bias,
                             Tensor& residual) {
  const char* op = "linear_add";
  const Dims d = check_product(op, x, 1, w, bias, residual, false);
  kernels::GemvFusion f;
  f.add_to_out = true;
  if (kernels::fused_gemv_supported(d.t, d.n, d.k, x.data(), w.data(), f)) {
    kernels::fused_gemv(x.data(), w.data(), data_or_null(bias), residual.data(), false, d.t, d.n,
                        d.k, f, num_sms_, stream());
    return;
  }
  Tensor product(scratch(residual.nbytes()), DType::kBF16, residual.shape(), Device::kCuda);
  linear(x, w, bias, product);
  kernels::add_into(bf_mut(residual), bf(product), residual.numel(), stream());
}

void CudaBackend::silu_mul_linear_add(const Tensor& gate_up, const Tensor& w, Tensor& residual) {
  const char* op = "silu_mul_linear_add";
  const Dims d = check_product(op, gate_up, 2, w, Tensor(), residual, false);
  kernels::GemvFusion f;
  f.prologue = kernels::GemvPrologue::kSiluMul;
  f.add_to_out = true;
  if (kernels::fused_gemv_supported(d.t, d.n, d.k, gate_up.data(), w.data(), f)) {
    kernels::fused_gemv(gate_up.data(), w.data(), nullptr, residual.data(), false, d.t, d.n, d.k,
                        f, num_sms_, stream());
    return;
  }
  // Unfused: one scratch holds the activation and, after it, the product.
  const size_t act_bytes = static_cast<size_t>(d.t * d.k) * 2;
  const size_t act_room = (act_bytes + 255) / 256 * 256;
  auto* base = static_cast<uint8_t*>(scratch(act_room + residual.nbytes()));
  Tensor act(base, DType::kBF16, Shape{d.t, d.k}, Device::kCuda);
  Tensor product(base + act_room, DType::kBF16, residual.shape(), Device::kCuda);
  silu_mul(gate_up, act);
  linear(act, w, Tensor(), product);
  kernels::add_into(bf_mut(residual), bf(product), residual.numel(), stream());
}

void CudaBackend::silu_mul_linear(const Tensor& gate_up, const Tensor& w, Tensor& out) {
  const char* op = "silu_mul_linear";
  const Dims d = check_product(op, gate_up, 2, w, Tensor(), out, false);
  kernels::GemvFusion f;
  f.prologue = kernels::GemvPrologue::kSiluMul;
  if (kernels::fused_gemv_supported(d.t, d.n, d.k, gate_up.data(), w.data(), f)) {
    kernels::fused_gemv(gate_up.data(), w.data(), nullptr, out.data(), false, d.t, d.n, d.k, f,
                        num_sms_, stream());
    return;
  }
  Tensor act(scratch(static_cast<size_t>(d.t * d.k) * 2), DType::kBF16, Shape{d.t, d.k},
             Device::kCuda);
  silu_mul(gate_up, act);
  linear(act, w, Tensor(), out);
}

}  // namespace kestrel
