// CudaBackend: the Backend implementation behind make_cuda_backend(). Internal to
// src/backend/cuda; the public contract is in cuda_backend.h.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemm/gemm.h"
#include "backend/cuda/kernels.h"

namespace kestrel {

// The stream outlives the backend while any tensor still needs it for its stream-ordered
// free, so tensors hold a reference to this.
struct CudaStreamHolder {
  explicit CudaStreamHolder(int device);
  ~CudaStreamHolder();
  int device;
  cudaStream_t stream = nullptr;
};

class CudaSampler;
class UploadRing;

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device_index, CudaKvLayout kv_layout);

  Device device() const override { return Device::kCuda; }
  std::string name() const override { return name_; }
  DType compute_dtype() const override { return DType::kBF16; }

  Tensor empty(DType dtype, Shape shape) override;
  Tensor upload(const Tensor& host, DType dtype) override;
  Tensor to_host(const Tensor& t) override;
  std::vector<LayerKvCache> allocate_kv_cache(const KvCacheSpec& spec) override;
  void synchronize() override;
  // Memory and graph hooks (cuda_runtime_hooks.cc).
  MemoryInfo memory_info() override;
  void reset_peak_memory() override;
  void set_profiler_capture(bool on) override;
  void copy_from_host(const Tensor& host, Tensor& dst) override;
  void copy_to_host(const Tensor& src, Tensor& host) override;
  double measure_copy_bandwidth(size_t bytes) override;
  std::unique_ptr<Graph> capture_graph(const std::function<void()>& record) override;

  void embedding(const Tensor& ids, const Tensor& table, Tensor& out) override;
  void embedding_shard(const Tensor& ids, const Tensor& table, int64_t first_id,
                       Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out) override;
  void add_rms_norm(Tensor& x, Tensor& residual, const Tensor& w, float eps) override;
  void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) override;
  void silu_mul(const Tensor& x, Tensor& out) override;
  void linear_silu_mul(const Tensor& x, const Tensor& w, Tensor& gate_up, Tensor& out) override;
  void linear_qk_norm_rope_attention(const Tensor& x, const Tensor& w_qkv, const Tensor& bias,
                                     Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm,
                                     float eps, const Tensor& cos_sin, const AttentionShape& shape,
                                     const AttentionMetadata& meta, LayerKvCache& kv, float scale,
                                     Tensor& q, Tensor& out) override;
  void gather_rows(const Tensor& x, const Tensor& rows, Tensor& out) override;
  void qk_norm_rope_store(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm,
                          float eps, const Tensor& cos_sin, const AttentionShape& shape,
                          const AttentionMetadata& meta, LayerKvCache& kv,
                          Tensor& q_out) override;
  void attention(const Tensor& q, const LayerKvCache& kv, const AttentionShape& shape,
                 const AttentionMetadata& meta, float scale, Tensor& out) override;
  void qk_norm_rope_attention(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm,
                              float eps, const Tensor& cos_sin, const AttentionShape& shape,
                              const AttentionMetadata& meta, LayerKvCache& kv, float scale,
                              Tensor& q, Tensor& out) override;
  // Fused ops for small steps (cuda_fused_ops.cc).
  int fused_linear_max_rows() const override;
  void norm_linear(const Tensor& x, const Tensor& norm_w, float eps, const Tensor& w,
                   const Tensor& bias, Tensor& out) override;
  void linear_add(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& residual) override;
  void silu_mul_linear_add(const Tensor& gate_up, const Tensor& w, Tensor& residual) override;
  void silu_mul_linear(const Tensor& gate_up, const Tensor& w, Tensor& out) override;
  // Device sampling (sampling_backend.cc).
  bool supports_sampling() const override { return true; }
  std::vector<SampledToken> sample(const Tensor& logits, const SamplingBatch& batch) override;
  void stage_sample(const SamplingBatch& batch, int vocab) override;
  void launch_sample(const Tensor& logits, const SamplingBatch& batch) override;
  std::vector<SampledToken> collect_sample() override;
  void discard_samples() override;
  bool supports_vocab_parallel_sampling() const override { return true; }
  void launch_sample_vocab_parallel(const Tensor& local_logits, const SamplingBatch& batch,
                                    int vocab, Communicator& comm, bool keep) override;
  std::vector<TokenLogprobs> token_logprobs(const Tensor& logits, std::span<const int> tokens,
                                            int num_top) override;  // sampling/token_logprobs.cc
  bool enable_token_feedback(int max_rows) override;
  bool samples_pending_tokens() const override;  // sampling/sampling_backend.cc
  // The token feedback buffer, i32 [max_rows]; undefined while feedback is off.
  const Tensor& token_feedback() const { return feedback_; }
  Tensor token_feedback_buffer() override { return feedback_; }

  cudaStream_t stream() const { return holder_->stream; }
  // The CUDA device index the backend runs on (for libraries that need it: NCCL).
  int device_index() const { return holder_->device; }
  CudaKvLayout kv_layout() const { return kv_layout_; }

 private:
  // embedding() and embedding_shard(): validates, then gathers ids - first_id (cuda_ops.cc).
  void embedding_rows(const char* op, const Tensor& ids, const Tensor& table, int64_t first_id,
                      Tensor& out);
  // Device scratch of at least `bytes`, reused across calls; grows (new address) only when a
  // call needs more, so a warm-up call before CUDA graph capture fixes its address.
  void* scratch(size_t bytes);
  // Launches paged attention (or, with rope, the fused decode kernel) with its split plan
  // and workspace (cuda_attention_ops.cc).
  void run_attention(kernels::PagedAttentionArgs a, const kernels::QkNormRopeArgs* rope,
                     int max_seq_len);
  // qk_norm_rope_store then attention on validated arguments: one kernel where a decode
  // kernel takes the batch (attention_rope_supported), else the store kernel first.
  void run_rope_attention(const kernels::QkNormRopeArgs& r, const kernels::PagedAttentionArgs& a,
                          int max_seq_len);
  // cos_sin rounded to bf16, for the prompt GEMM's RoPE epilogue (gemm_ws.h): made by the
  // first call for a table (keyed by its address and size) and kept; null when that call
  // comes during a stream capture (no allocation there), and the caller does not fuse.
  const kernels::bf16* cos_sin_bf16(const Tensor& cos_sin);

  std::shared_ptr<CudaStreamHolder> holder_;
  std::unique_ptr<GemmRunner> gemm_;
  std::string name_;
  int num_sms_ = 0;
  CudaKvLayout requested_layout_;  // may be kAuto
  CudaKvLayout kv_layout_;         // never kAuto: the pages' layout (token-major until allocated)
  bool layout_settled_ = false;    // by the first allocate_kv_cache
  Tensor scratch_;
  // kernels::PagedAttentionArgs::split_counters: zeroed once, left zeroed by every kernel.
  Tensor split_counters_;
  Tensor cos_sin_bf16_;
  const void* cos_sin_bf16_of_ = nullptr;
  // Scratch buffers replaced by a larger one. Kept, not freed: a captured graph may still
  // write to the old address.
  std::vector<Tensor> retired_scratch_;
  CudaSampler& sampler();
  std::shared_ptr<CudaSampler> sampler_;  // made by the first sample()
  Tensor feedback_;
  std::shared_ptr<UploadRing> uploads_;  // copy_from_host's staging
};

}  // namespace kestrel
