// GEMMs: out[T, N] = x[T, K] * w[N, K]^T (+ bias[N]), bf16 inputs, fp32 accumulation, bf16
// or fp32 output.
//
// Small batches (T <= gemv_max_tokens(), w at most kGemvMaxWeightBytes, K a multiple of 8, x
// and w 16-byte aligned) take our own weight-streaming kernel (gemv.h); everything else goes
// through cuBLASLt, except that on compute capability 9.0 bf16 products without bias that
// wgmma_gemm_deep_preferred names (decode steps of 9-64 rows, small products) take the wgmma
// kernel's 64-row plans (wgmma_gemm.h; set_wgmma_gemm), and prompt-sized ones
// may take the warp-specialised kernel (gemm_ws.h; set_prompt_kernel). The first call for a shape (T, N, K, output type, bias, pointer
// alignment) creates the cuBLASLt descriptors and asks the heuristic for its best algorithm;
// later calls reuse them. Optionally (set_tune_algorithms, off by default) decode-sized
// shapes (T <= kTuneMaxTokens) are timed instead: the first call outside stream capture runs
// up to kTuneAlgos of the heuristic's candidates (and split-K versions of its first ones) on
// its own pointers, waits for them (once per
// shape) and keeps the fastest; a plan made inside a capture keeps the heuristic's answer
// until the first call outside one. Not thread-safe: one GemmRunner per stream (the backend
// owns one).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "backend/cuda/kernels.h"

namespace kestrel {

class GemmRunner {
 public:
  // Allocates the cuBLASLt handle and a workspace on the current device.
  explicit GemmRunner(cudaStream_t stream);
  ~GemmRunner();
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;

  // x [t, k] bf16, w [n, k] bf16, out [t, n] of `out_type` (CUDA_R_16BF or CUDA_R_32F), all
  // device pointers, row-major. bias [n] bf16 (added in the epilogue, in fp32 before the
  // rounding) only with a bf16 out; otherwise null. Enqueues on the stream.
  // Throws kestrel::Error when cuBLASLt has no algorithm for the shape.
  void run(const void* x, const void* w, const void* bias, void* out, cudaDataType_t out_type,
           int64_t t, int64_t n, int64_t k);

  // Number of distinct cuBLASLt shapes planned so far (tests check that plans are reused and
  // that the small-batch kernel needs none).
  size_t num_plans() const { return plans_.size(); }

  // Calls with t <= this (at most kernels::kGemvMaxTokens) take the small-batch kernel when
  // it supports them; 0 sends everything to cuBLASLt. The default is kDefaultGemvMaxTokens,
  // or the environment variable KESTREL_GEMV_MAX_TOKENS when set (for A/B measurements).
  // H200, Qwen3-0.6B shapes (docs/cuda_backend.md): the kernel beats cuBLASLt on the layer
  // GEMMs up to T = 8 (16% less time per layer at T = 8), loses on some at T = 16.
  void set_gemv_max_tokens(int t);
  int gemv_max_tokens() const { return gemv_max_tokens_; }
  static constexpr int kDefaultGemvMaxTokens = 8;
  // Larger weights stay with cuBLASLt: both stream them at ~95% of the copy rate there, and
  // cuBLASLt was 1-2% faster on the 311 MB LM head.
  static constexpr int64_t kGemvMaxWeightBytes = int64_t(64) << 20;

  // Whether decode-step products may take the wgmma kernel (wgmma_gemm.h): on by default, with
  // its 64-row plans where wgmma_gemm_deep_preferred says (H200, Qwen3-0.6B, session 24:
  // decode steps of 16 and 32 sequences 10-12% shorter than on cuBLASLt, 8 and 64 at par).
  // The environment variable KESTREL_GEMM_SM90 chooses: 0 off (cuBLASLt), 1 the 128-row plans
  // where wgmma_gemm_preferred says (session 16's rule, for measurements), 2 the default.
  // Ignored on devices other than compute capability 9.0.
  void set_wgmma_gemm(bool on);
  bool wgmma_gemm() const { return wgmma_; }

  // Prompt-sized products (t >= kPromptKernelMinTokens) on our warp-specialised wgmma kernel
  // (gemm_ws.h) on compute capability 9.0: kSiluMul (the default) takes the MLP's gate_up
  // product with its activation fused (run_silu_mul); kAll also every plain bf16 product
  // without bias (run); kQkvRope also the qkv product with its norm, RoPE and cache store
  // (run_qkv_rope). The environment variable KESTREL_GEMM_WS (0-3, the enum's values)
  // overrides the default; ignored on other devices. H200 (docs/cuda_backend.md, "Prompt-
  // sized GEMM on wgmma"): the fused gate_up at 2,048-8,192 rows takes 17-20% less than
  // cuBLASLt's product plus silu_mul, and loses at 1,024 (one and a half waves of tiles);
  // the plain products are within 1-7% of cuBLASLt's at 2,048+ rows; with the qkv RoPE
  // epilogue (bit for bit the unfused store's) the prefill workload is at par at best
  // (494,028 against 501,704 prompt tok/s in one call): its three epilogue warps barely keep
  // up with the products. So only kSiluMul is on by default.
  enum class PromptKernel { kOff = 0, kSiluMul = 1, kAll = 2, kQkvRope = 3 };
  void set_prompt_kernel(PromptKernel k) { prompt_kernel_ = sm90_ ? k : PromptKernel::kOff; }
  PromptKernel prompt_kernel() const { return prompt_kernel_; }
  static constexpr PromptKernel kDefaultPromptKernel = PromptKernel::kSiluMul;
  static constexpr int64_t kPromptKernelMinTokens = 2048;
  // out[t, n / 2] = silu_mul(x w^T) (activation.cu's roundings) with w = [gate; up] of n rows,
  // when the prompt kernel takes this call; false (nothing enqueued) otherwise, and the
  // caller runs run() then silu_mul.
  bool run_silu_mul(const void* x, const void* w, void* out, int64_t t, int64_t n, int64_t k);
  // The qkv product with qk_norm_rope_store as its epilogue (gemm_ws_rope: q to rope.q_out,
  // K and V into the cache), when the prompt kernel takes this call; false otherwise, and the
  // caller runs run() then qk_norm_rope_store.
  bool run_qkv_rope(const void* x, const void* w, int64_t t, int64_t n, int64_t k,
                    const kernels::QkNormRopeArgs& rope);

  // Timing of cuBLASLt candidates (see above); off by default (it cost more in first-call
  // planning than it saved end to end), on when the environment variable KESTREL_GEMM_TUNE
  // is 1. Affects shapes planned afterwards.
  void set_tune_algorithms(bool on) { tune_ = on; }
  static constexpr int64_t kTuneMaxTokens = 512;
  static constexpr int kTuneAlgos = 8;
  // Besides the heuristic's kTuneAlgos answers, its first kTuneSplitKFrom again with each of
  // these K splits, where their algorithm takes one (add_split_k_variants).
  static constexpr int kTuneSplitKFrom = 2;
  static constexpr int32_t kTuneSplits[] = {2, 3, 4, 6, 8};
  // Number of shapes whose algorithm was chosen by timing (tests).
  size_t num_tuned() const { return num_tuned_; }

  // Rows beyond kBucketMinTokens (prompt-sized steps, of any length the scheduler makes)
  // take the algorithm cuBLASLt picks for the next power of two, when it accepts their own
  // shape: the first step of a new length then loads no new kernels. On the H100 a
  // 500-token prompt's first step paid ~8 ms of host time without it. Off when the
  // environment variable KESTREL_GEMM_BUCKETS is 0 (for A/B measurements).
  static constexpr int64_t kBucketMinTokens = 256;
  int64_t bucket_rows(int64_t t) const;

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    std::vector<cublasLtMatmulAlgo_t> candidates;  // to be timed; empty once chosen
  };
  // t, n, k, out_type, bias, alignment (bytes) of the four pointers.
  using Key = std::tuple<int64_t, int64_t, int64_t, int, bool, int>;

  Plan& plan_for(const Key& key);
  // Times p.candidates on these pointers and keeps the fastest in p.algo.
  void tune(Plan& p, const void* x, const void* w, void* out);
  // Appends split-K versions of p.candidates' first `from` (see kTuneSplits).
  void add_split_k_variants(Plan& p, int from);

  cudaStream_t stream_;
  int num_sms_ = 1;
  int gemv_max_tokens_ = kDefaultGemvMaxTokens;
  bool tune_ = false;
  bool sm90_ = false;  // compute capability 9.0: the wgmma kernel can run
  bool wgmma_ = false;
  bool wgmma_deep_ = true;  // the 64-row plans (else KESTREL_GEMM_SM90=1's 128-row rule)
  PromptKernel prompt_kernel_ = PromptKernel::kOff;
  bool buckets_ = true;
  size_t num_tuned_ = 0;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan> plans_;
};

}  // namespace kestrel
