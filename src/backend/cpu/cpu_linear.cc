// out[T, N] = x[T, K] w[N, K]^T (+ bias) through OpenBLAS sgemm with w transposed, which is
// how Hugging Face stores nn.Linear weights ([out_features, in_features]).
//
// OpenBLAS runs single-threaded (see CpuBackend's constructor) and the OpenMP team splits
// the output columns: each thread multiplies x by its own slice of w's rows. A second thread
// pool inside OpenBLAS would busy-wait against OpenMP's between ops; on a loaded machine
// that made the model forward ~15x slower. Slicing N also suits decode (T = 1), where the
// product is a matrix-vector one and N is the only parallel dimension.
#include <cblas.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_check.h"
#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

namespace kestrel::cpu {

// Up to this many rows, matrix-vector products instead of one sgemm (see below).
constexpr int64_t kGemvMaxRows = 6;
// Rows of w per sgemv chunk: 64 rows of K = 1024..3072 floats (256 KB..768 KB) stay in L2
// while every x row passes over them, so w is read from memory once for all T rows.
constexpr int64_t kGemvChunk = 64;

void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out, int num_threads) {
  const char* op = "linear";
  check_tensor(x, op, "x", DType::kF32, 2);
  check_tensor(w, op, "w", DType::kF32, 2);
  check_tensor(out, op, "out", DType::kF32, 2);
  const int64_t T = x.dim(0), K = x.dim(1), N = w.dim(0);
  check_dim(w, op, "w", 1, K, "in_features (x's last dimension)");
  check_dim(out, op, "out", 0, T, "T");
  check_dim(out, op, "out", 1, N, "out_features (w's first dimension)");
  if (bias.defined()) {
    check_tensor(bias, op, "bias", DType::kF32, 1);
    check_dim(bias, op, "bias", 0, N, "out_features");
  }
  if (T == 0 || N == 0) return;
  float* o = out.data_as<float>();
  float beta = 0.0f;
  if (bias.defined()) {
    // Seed every row with the bias and let sgemm accumulate onto it (beta = 1).
    const float* b = bias.data_as<float>();
    for (int64_t t = 0; t < T; ++t) std::memcpy(o + t * N, b, N * sizeof(float));
    beta = 1.0f;
  }
  if (K == 0) {
    if (!bias.defined()) std::memset(o, 0, out.nbytes());
    return;
  }
  // Slices of whole 16-column groups, at most one per thread, none tiny.
  constexpr int64_t kAlign = 16;
  const int64_t groups = (N + kAlign - 1) / kAlign;
  const int64_t slices =
      std::max<int64_t>(1, std::min<int64_t>(team_size(T * N * K / 8, num_threads), groups));
  const float* xs = x.data_as<float>();
  const float* ws = w.data_as<float>();
#pragma omp parallel for num_threads(static_cast <int>(slices)) schedule(static, 1)
  for (int64_t s = 0; s < slices; ++s) {
    const int64_t begin = groups * s / slices * kAlign;
    const int64_t end = std::min(N, groups * (s + 1) / slices * kAlign);
    if (begin >= end) continue;
    const blasint k = static_cast<blasint>(K);
    if (T <= kGemvMaxRows) {
      // sgemm would first copy ("pack") the whole weight slice, doubling the memory
      // traffic of a decode step; matrix-vector products over cache-sized chunks of w read
      // it from memory once.
      for (int64_t c = begin; c < end; c += kGemvChunk) {
        const blasint rows = static_cast<blasint>(std::min(kGemvChunk, end - c));
        for (int64_t t = 0; t < T; ++t) {
          cblas_sgemv(CblasRowMajor, CblasNoTrans, rows, k, 1.0f, ws + c * K, k, xs + t * K, 1,
                      beta, o + t * N + c, 1);
        }
      }
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(T),
                  static_cast<blasint>(end - begin), k, 1.0f, xs, k, ws + begin * K, k, beta,
                  o + begin, static_cast<blasint>(N));
    }
  }
}

}  // namespace kestrel::cpu
