#include "backend/cpu/cpu_backend.h"

#include "backend/cpu/cpu_check.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "core/logging.h"

namespace kestrel {
namespace {

bool is_float(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// OpenBLAS picks its kernels when it is loaded. Releases older than the CPU (Debian 12 ships
// 0.3.21) fall back to the SSE3 "Prescott" kernels on unknown AVX-512 parts, ~5x slower
// GEMMs; the only fix is the environment variable, read at load time.
void warn_if_generic_blas() {
#if defined(__x86_64__) && defined(__GNUC__)
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string core = openblas_get_corename();
    const bool generic = core == "Prescott" || core == "Core2" || core == "Katmai" ||
                         core == "Nehalem" || core == "Unknown";
    if (!generic || !__builtin_cpu_supports("avx2")) return;
    KS_LOG_WARN(
        "OpenBLAS is using its generic '{}' kernels on this AVX2 CPU; run with "
        "OPENBLAS_CORETYPE={} for several times faster CPU matrix products",
        core, __builtin_cpu_supports("avx512f") ? "SkylakeX" : "Haswell");
  });
#endif
}

// num_threads as given (0: every core), refused when absurd: libgomp fails at ~40,000
// threads and crashes at ~100,000, long after any gain (a few times the cores at most).
int checked_threads(int num_threads) {
  const int cores = omp_get_num_procs();
  KS_CHECK(num_threads >= 0 && num_threads <= 4 * cores,
           "num_threads must be between 0 (every core) and {} (4 x the {} cores of this "
           "machine), got {}",
           4 * cores, cores, num_threads);
  return num_threads > 0 ? num_threads : omp_get_max_threads();
}

}  // namespace

CpuBackend::CpuBackend(int num_threads) : num_threads_(checked_threads(num_threads)) {
  // Parallelism comes from OpenMP only; cpu_linear.cc says why.
  openblas_set_num_threads(1);
  warn_if_generic_blas();
  if (const char* rows = std::getenv("KESTREL_FUSED_MAX_ROWS")) {
    fused_rows_ = std::max(0, std::atoi(rows));
  }
}

Tensor CpuBackend::empty(DType dtype, Shape shape) {
  for (int i = 0; i < shape.ndim(); ++i) {
    KS_CHECK(shape[i] >= 0, "cpu empty: negative dimension in shape {}", shape.str());
  }
  return Tensor::host(dtype, shape);
}

Tensor CpuBackend::upload(const Tensor& host, DType dtype) {
  KS_CHECK(host.defined(), "cpu upload: tensor is not defined");
  KS_CHECK(host.device() == Device::kCpu, "cpu upload: source is not host memory");
  Tensor out = Tensor::host(dtype, host.shape());
  if (host.dtype() == dtype) {
    std::memcpy(out.data(), host.data(), host.nbytes());
    return out;
  }
  KS_CHECK(is_float(host.dtype()) && is_float(dtype), "cpu upload: cannot convert {} to {}",
           dtype_name(host.dtype()), dtype_name(dtype));
  // Chunks so large weights convert on every thread.
  constexpr int64_t kChunk = 1 << 16;
  const int64_t n = host.numel();
  const size_t in_size = dtype_size(host.dtype());
  const char* src = static_cast<const char*>(host.data());
  float* f32 = dtype == DType::kF32 ? out.data_as<float>() : nullptr;
#pragma omp parallel for num_threads(cpu::team_size(n, num_threads_)) schedule(static)
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t len = std::min(kChunk, n - begin);
    if (f32 != nullptr) {
      convert_to_f32(src + begin * in_size, host.dtype(), f32 + begin, len);
    } else {
      std::vector<float> tmp(len);
      convert_to_f32(src + begin * in_size, host.dtype(), tmp.data(), len);
      convert_from_f32(tmp.data(), static_cast<char*>(out.data()) + begin * dtype_size(dtype),
                       dtype, len);
    }
  }
  return out;
}

Tensor CpuBackend::to_host(const Tensor& t) {
  KS_CHECK(t.defined(), "cpu to_host: tensor is not defined");
  KS_CHECK(t.device() == Device::kCpu, "cpu to_host: tensor is not in CPU memory");
  Tensor out = Tensor::host(t.dtype(), t.shape());
  std::memcpy(out.data(), t.data(), t.nbytes());
  return out;
}

std::vector<LayerKvCache> CpuBackend::allocate_kv_cache(const KvCacheSpec& spec) {
  spec.check("cpu", DType::kF32);
  const Shape shape{spec.num_blocks, spec.block_size, spec.num_kv_heads, spec.head_dim};
  // One allocation for every layer; Tensor::host maps large buffers lazily, so a cache of
  // gigabytes costs nothing until its pages are written.
  Tensor all = Tensor::host(spec.dtype, Shape{2 * spec.num_layers, shape[0], shape[1], shape[2] * shape[3]});
  std::vector<LayerKvCache> layers(spec.num_layers);
  for (int l = 0; l < spec.num_layers; ++l) {
    layers[l].k = all.slice(2 * l, 2 * l + 1).view(shape);
    layers[l].v = all.slice(2 * l + 1, 2 * l + 2).view(shape);
  }
  if (spec.dtype != DType::kF8E4M3) return layers;
  // Per layer [2, Hkv] each: scales 1, amax and clamped 0 (Tensor::host zero-fills).
  const Shape per_layer{2, spec.num_kv_heads};
  const Shape all_layers{spec.num_layers, 2 * spec.num_kv_heads};
  Tensor scale = Tensor::host(DType::kF32, all_layers);
  std::fill_n(scale.data_as<float>(), scale.numel(), 1.0f);
  Tensor amax = Tensor::host(DType::kF32, all_layers);
  Tensor clamped = Tensor::host(DType::kI64, all_layers);
  for (int l = 0; l < spec.num_layers; ++l) {
    layers[l].scale = scale.slice(l, l + 1).view(per_layer);
    layers[l].amax = amax.slice(l, l + 1).view(per_layer);
    layers[l].clamped = clamped.slice(l, l + 1).view(per_layer);
  }
  return layers;
}

void CpuBackend::embedding(const Tensor& ids, const Tensor& table, Tensor& out) {
  cpu::embedding(ids, table, out, num_threads_);
}

void CpuBackend::embedding_shard(const Tensor& ids, const Tensor& table, int64_t first_id,
                                 Tensor& out) {
  KS_CHECK(first_id >= 0, "embedding_shard: first_id {} is negative", first_id);
  cpu::embedding_shard(ids, table, first_id, out, num_threads_);
}

void CpuBackend::rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  cpu::rms_norm(x, w, eps, out, num_threads_);
}

void CpuBackend::add_rms_norm(Tensor& x, Tensor& residual, const Tensor& w, float eps) {
  cpu::add_rms_norm(x, residual, w, eps, num_threads_);
}

void CpuBackend::linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  cpu::linear(x, w, bias, out, num_threads_);
}

void CpuBackend::silu_mul(const Tensor& x, Tensor& out) { cpu::silu_mul(x, out, num_threads_); }

void CpuBackend::norm_linear(const Tensor& x, const Tensor& norm_w, float eps, const Tensor& w,
                             const Tensor& bias, Tensor& out) {
  cpu::check_tensor(x, "norm_linear", "x", DType::kF32, 2);
  Tensor normed = Tensor::host(DType::kF32, x.shape());
  cpu::rms_norm(x, norm_w, eps, normed, num_threads_);
  cpu::linear(normed, w, bias, out, num_threads_);
}

void CpuBackend::linear_add(const Tensor& x, const Tensor& w, const Tensor& bias,
                            Tensor& residual) {
  cpu::check_tensor(residual, "linear_add", "residual", DType::kF32, 2);
  Tensor product = Tensor::host(DType::kF32, residual.shape());
  cpu::linear(x, w, bias, product, num_threads_);
  float* r = residual.data_as<float>();
  const float* p = product.data_as<float>();
  for (int64_t i = 0; i < residual.numel(); ++i) r[i] += p[i];
}

void CpuBackend::silu_mul_linear_add(const Tensor& gate_up, const Tensor& w, Tensor& residual) {
  cpu::check_tensor(gate_up, "silu_mul_linear_add", "gate_up", DType::kF32, 2);
  Tensor act = Tensor::host(DType::kF32, Shape{gate_up.dim(0), gate_up.dim(1) / 2});
  cpu::silu_mul(gate_up, act, num_threads_);
  linear_add(act, w, Tensor(), residual);
}

void CpuBackend::silu_mul_linear(const Tensor& gate_up, const Tensor& w, Tensor& out) {
  cpu::check_tensor(gate_up, "silu_mul_linear", "gate_up", DType::kF32, 2);
  Tensor act = Tensor::host(DType::kF32, Shape{gate_up.dim(0), gate_up.dim(1) / 2});
  cpu::silu_mul(gate_up, act, num_threads_);
  cpu::linear(act, w, Tensor(), out, num_threads_);
}

void CpuBackend::gather_rows(const Tensor& x, const Tensor& rows, Tensor& out) {
  cpu::gather_rows(x, rows, out, num_threads_);
}

void CpuBackend::qk_norm_rope_store(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm,
                                    float eps, const Tensor& cos_sin, const AttentionShape& shape,
                                    const AttentionMetadata& meta, LayerKvCache& kv,
                                    Tensor& q_out) {
  cpu::qk_norm_rope_store(qkv, q_norm, k_norm, eps, cos_sin, shape, meta, kv, q_out, num_threads_);
}

void CpuBackend::attention(const Tensor& q, const LayerKvCache& kv, const AttentionShape& shape,
                           const AttentionMetadata& meta, float scale, Tensor& out) {
  cpu::attention(q, kv, shape, meta, scale, out, num_threads_);
}

std::unique_ptr<Backend> make_cpu_backend(int num_threads) {
  return std::make_unique<CpuBackend>(num_threads);
}

}  // namespace kestrel
