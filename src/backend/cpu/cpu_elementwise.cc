// Row-wise ops with no reduction across rows: embedding lookup (of the whole vocabulary or
// of one tensor-parallel rank's shard), SiLU-and-multiply, row gather. Each parallelises
// over rows.
#include <cmath>
#include <cstring>
#include <functional>
#include <string>

#include "backend/cpu/cpu_check.h"
#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

namespace kestrel::cpu {

namespace {

// dst[i] = src[index[i]] for rows of H floats. Indices are range-checked first.
void copy_rows(const float* src, int64_t num_src_rows, int64_t H, const int32_t* index,
               int64_t num_rows, float* dst, int num_threads,
               const std::function<std::string(int64_t i)>& describe_bad_index) {
  for (int64_t i = 0; i < num_rows; ++i) {
    KS_CHECK(index[i] >= 0 && index[i] < num_src_rows, "{}", describe_bad_index(i));
  }
#pragma omp parallel for num_threads(team_size(num_rows* H, num_threads)) schedule(static)
  for (int64_t i = 0; i < num_rows; ++i) {
    std::memcpy(dst + i * H, src + static_cast<int64_t>(index[i]) * H, H * sizeof(float));
  }
}

}  // namespace

void embedding(const Tensor& ids, const Tensor& table, Tensor& out, int num_threads) {
  embedding_shard(ids, table, -1, out, num_threads);
}

void embedding_shard(const Tensor& ids, const Tensor& table, int64_t first_id, Tensor& out,
                     int num_threads) {
  const bool shard = first_id >= 0;
  const char* op = shard ? "embedding_shard" : "embedding";
  check_tensor(ids, op, "ids", DType::kI32, 1);
  check_tensor(table, op, "table", DType::kF32, 2);
  check_tensor(out, op, "out", DType::kF32, 2);
  const int64_t T = ids.dim(0), V = table.dim(0), H = table.dim(1);
  check_dim(out, op, "out", 0, T, "T");
  check_dim(out, op, "out", 1, H, "hidden");
  const int32_t* id = ids.data_as<int32_t>();
  if (!shard) {
    copy_rows(table.data_as<float>(), V, H, id, T, out.data_as<float>(), num_threads,
              [&](int64_t t) {
                return fmt::format("{}: token id {} at row {} is outside the vocabulary of {}", op,
                                   id[t], t, V);
              });
    return;
  }
  // An id below zero is a pending token, which only a backend with token feedback has.
  for (int64_t t = 0; t < T; ++t) {
    KS_CHECK(id[t] >= 0, "{}: token id {} at row {} is negative", op, id[t], t);
  }
  const float* src = table.data_as<float>();
  float* dst = out.data_as<float>();
#pragma omp parallel for num_threads(team_size(T* H, num_threads)) schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const int64_t row = id[t] - first_id;
    if (row >= 0 && row < V) {
      std::memcpy(dst + t * H, src + row * H, H * sizeof(float));
    } else {
      std::memset(dst + t * H, 0, H * sizeof(float));
    }
  }
}

void silu_mul(const Tensor& x, Tensor& out, int num_threads) {
  const char* op = "silu_mul";
  check_tensor(x, op, "x", DType::kF32, 2);
  check_tensor(out, op, "out", DType::kF32, 2);
  const int64_t T = x.dim(0), I = out.dim(1);
  check_dim(out, op, "out", 0, T, "T");
  check_dim(x, op, "x", 1, 2 * I, "2 * intermediate");
  const float* in = x.data_as<float>();
  float* o = out.data_as<float>();
#pragma omp parallel for num_threads(team_size(T* I * 8, num_threads)) schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const float* gate = in + t * 2 * I;
    const float* up = gate + I;
    float* row = o + t * I;
    for (int64_t i = 0; i < I; ++i) {
      const float g = gate[i];
      row[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
  }
}

void gather_rows(const Tensor& x, const Tensor& rows, Tensor& out, int num_threads) {
  const char* op = "gather_rows";
  check_tensor(x, op, "x", DType::kF32, 2);
  check_tensor(rows, op, "rows", DType::kI32, 1);
  check_tensor(out, op, "out", DType::kF32, 2);
  const int64_t N = x.dim(0), H = x.dim(1), S = rows.dim(0);
  check_dim(out, op, "out", 0, S, "S");
  check_dim(out, op, "out", 1, H, "hidden");
  const int32_t* r = rows.data_as<int32_t>();
  copy_rows(x.data_as<float>(), N, H, r, S, out.data_as<float>(), num_threads, [&](int64_t s) {
    return fmt::format("{}: rows[{}] = {} is outside x's {} rows", op, s, r[s], N);
  });
}

}  // namespace kestrel::cpu
