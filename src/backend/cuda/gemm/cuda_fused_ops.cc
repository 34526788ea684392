// CudaBackend's fused ops for small steps (backend.h): norm_linear, linear_add and
// silu_mul_linear_add, each one fused_gemv kernel (gemv_fused.h) where it takes the shapes,
// else the unfused ops through a scratch buffer (same results, more kernels); layer_tail,
// one gemv_chain kernel (gemv_chain.h) where it takes the shapes, else those three ops.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/gemm/gemv_chain.h"
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

// KESTREL_LAYER_CHAIN=0 runs layer_tail as its four fused ops (for comparisons).
bool layer_chain_enabled() {
  static const bool on = [] {
    const char* env = std::getenv("KESTREL_LAYER_CHAIN");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  return on;
}

const void* data_or_null(const Tensor& t) { return t.defined() ? t.data() : nullptr; }

void check_norm(const char* op, const Tensor& norm_w, int64_t k) {
  check_tensor(op, "norm_w", norm_w, DType::kBF16, 1);
  KS_CHECK(norm_w.dim(0) == k, "{}: norm_w {} must be [{}]", op, norm_w.shape().str(), k);
}

}  // namespace

int CudaBackend::fused_linear_max_rows() const {
  return fused_max_rows();
}

void CudaBackend::norm_linear(const Tensor& x, const Tensor& norm_w, float eps, const Tensor& w,
                              const Tensor& bias, Tensor& out) {
  const char* op = "norm_linear";
  const Dims d = check_product(op, x, 1, w, bias, out, true);
  check_norm(op, norm_w, d.k);
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

void CudaBackend::layer_tail(const LayerTail& t) {
  const char* op = "layer_tail";
  const bool next = t.next_qkv.defined();
  kernels::GemvChain c;
  c.num_products = next ? 4 : 3;
  c.eps = t.eps;
  const Dims d0 = check_product(op, t.attn, 1, t.o_proj, t.o_bias, t.residual, false);
  const Dims d1 = check_product(op, t.residual, 1, t.gate_up_w, Tensor(), t.gate_up, false);
  check_norm(op, t.post_norm, d1.k);
  const Dims d2 = check_product(op, t.gate_up, 2, t.down, Tensor(), t.residual, false);
  c.p[0] = {t.attn.data(), t.o_proj.data(), data_or_null(t.o_bias), nullptr, t.residual.data(),
            d0.n, d0.k};
  c.p[1] = {t.residual.data(), t.gate_up_w.data(), nullptr, t.post_norm.data(), t.gate_up.data(),
            d1.n, d1.k};
  c.p[2] = {t.gate_up.data(), t.down.data(), nullptr, nullptr, t.residual.data(), d2.n, d2.k};
  if (next) {
    const Dims d3 = check_product(op, t.residual, 1, t.next_qkv, t.next_qkv_bias, t.qkv, false);
    check_norm(op, t.next_norm, d3.k);
    c.p[3] = {t.residual.data(), t.next_qkv.data(), data_or_null(t.next_qkv_bias),
              t.next_norm.data(), t.qkv.data(), d3.n, d3.k};
  }
  c.t = d0.t;
  if (layer_chain_enabled() && kernels::gemv_chain_supported(c)) {
    kernels::gemv_chain(c, static_cast<unsigned*>(grid_barrier_.data()), num_sms_, stream());
    return;
  }
  Backend::layer_tail(t);
}

}  // namespace kestrel
