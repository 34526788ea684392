// CpuBackend: the fp32 reference implementation of Backend (src/backend/backend.h).
//
// Everything is computed in F32: weights are converted to F32 once at upload (BF16/F16 ->
// F32), activations are F32, matrix products go through OpenBLAS (cblas_sgemm), and the
// other ops are plain loops parallelised with OpenMP. It is meant to be obviously correct
// first and reasonably fast second; the CUDA backend is the fast one.
//
// Memory is host memory (Device::kCpu); synchronize() is a no-op because every op has
// finished when it returns. KV cache layout, per layer, for K and for V:
//   [num_blocks, block_size, num_kv_heads, head_dim]   (F32, or F8_E4M3 when asked for)
// all layers in one allocation. An F8_E4M3 cache follows LayerKvCache's contract: values
// are quantized as they are stored and dequantized as attention reads them (core/fp8.h).
//
// Thread safety: one CpuBackend may be used by one thread at a time (ops use the OpenMP
// and OpenBLAS thread pools, which are process-wide).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace kestrel {

class CpuBackend final : public Backend {
 public:
  // num_threads <= 0 uses every core OpenMP reports. Sets OpenBLAS to one thread
  // (process-wide): the OpenMP team parallelises the GEMMs instead.
  explicit CpuBackend(int num_threads);

  int num_threads() const { return num_threads_; }

  Device device() const override { return Device::kCpu; }
  std::string name() const override { return "cpu"; }
  DType compute_dtype() const override { return DType::kF32; }

  Tensor empty(DType dtype, Shape shape) override;
  Tensor upload(const Tensor& host, DType dtype) override;
  Tensor to_host(const Tensor& t) override;
  std::vector<LayerKvCache> allocate_kv_cache(const KvCacheSpec& spec) override;
  void synchronize() override {}

  void embedding(const Tensor& ids, const Tensor& table, Tensor& out) override;
  void embedding_shard(const Tensor& ids, const Tensor& table, int64_t first_id,
                       Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) override;
  void add_rms_norm(Tensor& x, Tensor& residual, const Tensor& w, float eps) override;
  void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) override;
  void silu_mul(const Tensor& x, Tensor& out) override;
  void gather_rows(const Tensor& x, const Tensor& rows, Tensor& out) override;
  void qk_norm_rope_store(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, float eps,
                          const Tensor& cos_sin, const AttentionShape& shape,
                          const AttentionMetadata& meta, LayerKvCache& kv, Tensor& q_out) override;
  void attention(const Tensor& q, const LayerKvCache& kv, const AttentionShape& shape,
                 const AttentionMetadata& meta, float scale, Tensor& out) override;

  // The fused ops are the unfused ones in sequence (identical results in F32). The model
  // takes them only when a test turns them on (set_fused_linear_max_rows, or
  // KESTREL_FUSED_MAX_ROWS=N in the environment of a process that makes the backend, for
  // engines in worker processes), so that the fused path of CausalLM runs in the CPU tests
  // too (the CUDA backend is where they pay).
  int fused_linear_max_rows() const override { return fused_rows_; }
  void set_fused_linear_max_rows(int rows) { fused_rows_ = rows; }
  void norm_linear(const Tensor& x, const Tensor& norm_w, float eps, const Tensor& w,
                   const Tensor& bias, Tensor& out) override;
  void linear_add(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& residual) override;
  void silu_mul_linear_add(const Tensor& gate_up, const Tensor& w, Tensor& residual) override;
  void silu_mul_linear(const Tensor& gate_up, const Tensor& w, Tensor& out) override;

 private:
  int num_threads_;
  int fused_rows_ = 0;
};

// The CPU backend as a Backend. See CpuBackend.
std::unique_ptr<Backend> make_cpu_backend(int num_threads);

}  // namespace kestrel
