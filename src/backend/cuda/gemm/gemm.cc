#include "backend/cuda/gemm/gemm.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm/gemm_ws.h"
#include "backend/cuda/gemm/gemv.h"
#include "backend/cuda/gemm/wgmma_gemm.h"
#include "backend/cuda/launch.h"
#include "core/error.h"

namespace kestrel {
namespace {

// cuBLASLt's guidance for Hopper is 32 MiB; smaller workspaces rule out some split-K algos.
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

// Candidate timing: each algorithm runs once to warm up, then kTuneReps times between events,
// all queued behind a spin kernel long enough to cover the host's launches.
constexpr int kTuneReps = 5;
constexpr int64_t kTuneSpinNs = 500'000;

bool stream_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    cudaGetLastError();  // not sticky; treat as capturing (never time inside a capture)
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

struct Events {
  explicit Events(size_t n) : e(n, nullptr) {
    for (auto& x : e) KS_CUDA_CHECK(cudaEventCreate(&x));
  }
  ~Events() {
    for (auto x : e) if (x != nullptr) cudaEventDestroy(x);
  }
  std::vector<cudaEvent_t> e;
};

int pointer_alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  int a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

}  // namespace

GemmRunner::GemmRunner(cudaStream_t stream) : stream_(stream) {
  int device = 0;
  KS_CUDA_CHECK(cudaGetDevice(&device));
  KS_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device));
  if (const char* env = std::getenv("KESTREL_GEMV_MAX_TOKENS")) set_gemv_max_tokens(std::atoi(env));
  if (const char* env = std::getenv("KESTREL_GEMM_TUNE")) tune_ = std::atoi(env) != 0;
  if (const char* env = std::getenv("KESTREL_GEMM_BUCKETS")) buckets_ = std::atoi(env) != 0;
  sm90_ = kernels::compute_capability() == 90;
  const char* wgmma_env = std::getenv("KESTREL_GEMM_SM90");
  const int wgmma_mode = wgmma_env != nullptr ? std::atoi(wgmma_env) : 2;
  wgmma_ = sm90_ && wgmma_mode != 0;
  wgmma_deep_ = wgmma_mode != 1;
  set_prompt_kernel(kDefaultPromptKernel);
  if (const char* env = std::getenv("KESTREL_GEMM_WS")) {
    set_prompt_kernel(static_cast<PromptKernel>(std::clamp(std::atoi(env), 0, 3)));
  }
  KS_CUBLAS_CHECK(cublasLtCreate(&handle_));
  KS_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
  workspace_bytes_ = kWorkspaceBytes;
}

GemmRunner::~GemmRunner() {
  for (auto& [key, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.d);
    cublasLtMatmulDescDestroy(p.desc);
  }
  cudaFree(workspace_);  // no throw from a destructor; errors here are at process teardown
  cublasLtDestroy(handle_);
}

int64_t GemmRunner::bucket_rows(int64_t t) const {
  if (!buckets_ || t <= kBucketMinTokens) return t;
  int64_t b = kBucketMinTokens;
  while (b < t) b *= 2;
  return b;
}

void GemmRunner::set_gemv_max_tokens(int t) {
  gemv_max_tokens_ = std::clamp(t, 0, kernels::kGemvMaxTokens);
}

void GemmRunner::set_wgmma_gemm(bool on) { wgmma_ = on && sm90_; }

GemmRunner::Plan& GemmRunner::plan_for(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  const auto [t, n, k, out_type_int, has_bias, align] = key;
  const auto out_type = static_cast<cudaDataType_t>(out_type_int);

  // Row-major out[t, n] = x[t, k] w[n, k]^T is column-major out^T[n, t] = w^T x^T, with w
  // seen as a column-major k x n matrix (transposed by the op) and x as k x t.
  Plan p;
  KS_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  KS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t)));
  KS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof(op_n)));
  if (has_bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    KS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  }
  KS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, k, n, k));
  KS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, k, t, k));
  KS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, out_type, n, t, n));

  cublasLtMatmulPreference_t pref = nullptr;
  KS_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  KS_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_, sizeof(workspace_bytes_)));
  const uint32_t align_bytes = static_cast<uint32_t>(align);
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    KS_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align_bytes, sizeof(align_bytes)));
  }
  const bool tune = tune_ && t <= kTuneMaxTokens;
  cublasLtMatmulHeuristicResult_t results[kTuneAlgos] = {};
  int found = 0;
  // A prompt-sized t asks for the algorithm of its bucket (the next power of two), whose
  // kernels the runner's start-up warm-up has loaded; the actual t must accept it.
  const int64_t bucket = bucket_rows(t);
  if (bucket != t && !tune) {
    cublasLtMatrixLayout_t bb = nullptr, bd = nullptr;
    KS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&bb, CUDA_R_16BF, k, bucket, k));
    KS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&bd, out_type, n, bucket, n));
    const cublasStatus_t bst =
        cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, bb, bd, bd, pref, 1, results, &found);
    cublasLtMatrixLayoutDestroy(bb);
    cublasLtMatrixLayoutDestroy(bd);
    cublasLtMatmulHeuristicResult_t check{};
    if (bst != CUBLAS_STATUS_SUCCESS || found == 0 ||
        cublasLtMatmulAlgoCheck(handle_, p.desc, p.a, p.b, p.d, p.d, &results[0].algo, &check) !=
            CUBLAS_STATUS_SUCCESS ||
        check.workspaceSize > workspace_bytes_) {
      found = 0;  // the bucket's algorithm does not fit this t: ask for t itself
    }
  }
  const cublasStatus_t st =
      found > 0 ? CUBLAS_STATUS_SUCCESS
                : cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.d, p.d, pref,
                                                 tune ? kTuneAlgos : 1, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.d);
    cublasLtMatmulDescDestroy(p.desc);
    throw_error("cuBLASLt has no algorithm for linear x[{}, {}] * w[{}, {}]^T -> {} (bias: {}, "
                "alignment {} bytes): {}",
                t, k, n, k, out_type == CUDA_R_32F ? "F32" : "BF16", has_bias, align,
                cublasLtGetStatusString(st));
  }
  p.algo = results[0].algo;
  for (int i = 0; tune && i < found; ++i) {
    if (results[i].state == CUBLAS_STATUS_SUCCESS) p.candidates.push_back(results[i].algo);
  }
  if (tune) add_split_k_variants(p, std::min(found, kTuneSplitKFrom));
  if (p.candidates.size() < 2) p.candidates.clear();  // nothing to choose between
  return plans_.emplace(key, std::move(p)).first->second;
}

// Where the heuristic's own answers have too few output tiles for the GPU (the products of a
// tensor-parallel rank's decode step: docs/parallel.md), a K split may fill it. The first
// `from` candidates, again with each split of kTuneSplits their algorithm takes, reduced
// through the workspace in fp32 (a separate, deterministic step).
void GemmRunner::add_split_k_variants(Plan& p, int from) {
  const size_t heuristic = p.candidates.size();
  for (size_t i = 0; i < heuristic && i < static_cast<size_t>(from); ++i) {
    int32_t split_support = 0;
    uint32_t schemes = 0;
    size_t written = 0;
    const cublasLtMatmulAlgo_t& base = p.candidates[i];
    if (cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &split_support,
                                          sizeof(split_support), &written) != CUBLAS_STATUS_SUCCESS ||
        split_support == 0 ||
        cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &schemes,
                                          sizeof(schemes), &written) != CUBLAS_STATUS_SUCCESS ||
        (schemes & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) == 0) {
      continue;
    }
    for (int32_t split : kTuneSplits) {
      cublasLtMatmulAlgo_t algo = base;
      const uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
      cublasLtMatmulHeuristicResult_t check{};
      if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split,
                                               sizeof(split)) != CUBLAS_STATUS_SUCCESS ||
          cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                               &scheme, sizeof(scheme)) != CUBLAS_STATUS_SUCCESS ||
          cublasLtMatmulAlgoCheck(handle_, p.desc, p.a, p.b, p.d, p.d, &algo, &check) !=
              CUBLAS_STATUS_SUCCESS ||
          check.workspaceSize > workspace_bytes_) {
        continue;
      }
      p.candidates.push_back(algo);
    }
  }
}

void GemmRunner::tune(Plan& p, const void* x, const void* w, void* out) {
  std::vector<cublasLtMatmulAlgo_t> candidates = std::move(p.candidates);
  p.candidates.clear();
  const float alpha = 1.0f, beta = 0.0f;
  auto call = [&](const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(handle_, p.desc, &alpha, w, p.a, x, p.b, &beta, out, p.d, out, p.d,
                          &algo, workspace_, workspace_bytes_, stream_) == CUBLAS_STATUS_SUCCESS;
  };
  const size_t n = candidates.size();
  Events ev(2 * n);
  std::vector<bool> ok(n, true);
  kernels::spin_for(kTuneSpinNs, stream_);
  for (size_t i = 0; i < n; ++i) {
    ok[i] = call(candidates[i]);
    KS_CUDA_CHECK(cudaEventRecord(ev.e[2 * i], stream_));
    for (int r = 0; r < kTuneReps && ok[i]; ++r) ok[i] = call(candidates[i]);
    KS_CUDA_CHECK(cudaEventRecord(ev.e[2 * i + 1], stream_));
  }
  KS_CUDA_CHECK(cudaEventSynchronize(ev.e.back()));
  size_t best = 0;  // the heuristic's first answer unless another is faster
  float best_ms = std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i) {
    float ms = 0;
    if (!ok[i]) continue;
    KS_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.e[2 * i], ev.e[2 * i + 1]));
    if (ms < best_ms) best_ms = ms, best = i;
  }
  p.algo = candidates[best];
  ++num_tuned_;
}

bool GemmRunner::run_silu_mul(const void* x, const void* w, void* out, int64_t t, int64_t n,
                              int64_t k) {
  if (prompt_kernel_ == PromptKernel::kOff || t < kPromptKernelMinTokens ||
      !kernels::gemm_ws_supported(t, n, k, x, w, out)) {
    return false;
  }
  kernels::gemm_ws(x, w, out, t, n, k, kernels::GemmWsEpilogue::kSiluMul, num_sms_, stream_);
  return true;
}

bool GemmRunner::run_qkv_rope(const void* x, const void* w, int64_t t, int64_t n, int64_t k,
                              const kernels::QkNormRopeArgs& rope) {
  if (prompt_kernel_ != PromptKernel::kQkvRope || t < kPromptKernelMinTokens ||
      !kernels::gemm_ws_rope_supported(t, n, k, x, w, rope)) {
    return false;
  }
  kernels::gemm_ws_rope(x, w, t, n, k, rope, num_sms_, stream_);
  return true;
}

void GemmRunner::run(const void* x, const void* w, const void* bias, void* out,
                     cudaDataType_t out_type, int64_t t, int64_t n, int64_t k) {
  if (t == 0 || n == 0) return;
  KS_ASSERT(bias == nullptr || out_type == CUDA_R_16BF, "GEMM bias needs a bf16 output");
  if (t <= gemv_max_tokens_ && n * k * 2 <= kGemvMaxWeightBytes &&
      kernels::gemv_supported(t, n, k, x, w)) {
    kernels::gemv(x, w, bias, out, out_type == CUDA_R_32F, t, n, k, num_sms_, stream_);
    return;
  }
  if (wgmma_ && out_type == CUDA_R_16BF && bias == nullptr &&
      (wgmma_deep_ ? kernels::wgmma_gemm_deep_preferred(t, n, k, num_sms_)
                   : kernels::wgmma_gemm_preferred(t, n, k)) &&
      kernels::wgmma_gemm_supported(t, n, k, x, w, out)) {
    kernels::WgmmaGemmPlan plan;
    if (wgmma_deep_) plan.rows = 64;
    kernels::wgmma_gemm(x, w, out, t, n, k, num_sms_, stream_, plan);
    return;
  }
  if (prompt_kernel_ == PromptKernel::kAll && t >= kPromptKernelMinTokens &&
      out_type == CUDA_R_16BF && bias == nullptr &&
      kernels::gemm_ws_supported(t, n, k, x, w, out)) {
    kernels::gemm_ws(x, w, out, t, n, k, kernels::GemmWsEpilogue::kStore, num_sms_, stream_);
    return;
  }
  int align = std::min(pointer_alignment(x), std::min(pointer_alignment(w), pointer_alignment(out)));
  if (bias != nullptr) align = std::min(align, pointer_alignment(bias));
  Plan& p = plan_for(Key{t, n, k, static_cast<int>(out_type), bias != nullptr, align});
  if (bias != nullptr) {
    KS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                   sizeof(bias)));
  }
  if (!p.candidates.empty() && !stream_capturing(stream_)) tune(p, x, w, out);
  const float alpha = 1.0f, beta = 0.0f;
  KS_CUBLAS_CHECK(cublasLtMatmul(handle_, p.desc, &alpha, w, p.a, x, p.b, &beta, out, p.d, out, p.d,
                                 &p.algo, workspace_, workspace_bytes_, stream_));
}

}  // namespace kestrel
