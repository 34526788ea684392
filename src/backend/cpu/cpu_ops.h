// The CPU ops behind CpuBackend, as free functions (one .cc per family). Shapes and
// semantics are those of the matching Backend method in src/backend/backend.h; every
// function validates its arguments first (cpu_check.h) and throws kestrel::Error naming the
// op and the offending tensor. num_threads is the OpenMP team size.
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace kestrel::cpu {

// OpenMP team size for an op of `work` units (elements touched, or multiply-adds): small ops
// run on the calling thread. Waking a team costs microseconds, and idle OpenMP workers spin
// between regions; on the tiny test models and on a loaded machine, parallelising every
// small op made forwards several times slower.
inline int team_size(int64_t work, int num_threads) {
  constexpr int64_t kMinParallelWork = int64_t(1) << 15;
  return work < kMinParallelWork ? 1 : num_threads;
}

// cpu_elementwise.cc
void embedding(const Tensor& ids, const Tensor& table, Tensor& out, int num_threads);
// first_id < 0: embedding() (an id outside the table throws); else embedding_shard().
void embedding_shard(const Tensor& ids, const Tensor& table, int64_t first_id, Tensor& out,
                     int num_threads);
void silu_mul(const Tensor& x, Tensor& out, int num_threads);
void gather_rows(const Tensor& x, const Tensor& rows, Tensor& out, int num_threads);

// cpu_norm.cc
void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out, int num_threads);
void add_rms_norm(Tensor& x, Tensor& residual, const Tensor& w, float eps, int num_threads);

// cpu_linear.cc
void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out, int num_threads);

// cpu_rope.cc
void qk_norm_rope_store(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, float eps,
                        const Tensor& cos_sin, const AttentionShape& shape,
                        const AttentionMetadata& meta, LayerKvCache& kv, Tensor& q_out,
                        int num_threads);

// cpu_attention.cc
void attention(const Tensor& q, const LayerKvCache& kv, const AttentionShape& shape,
               const AttentionMetadata& meta, float scale, Tensor& out, int num_threads);

}  // namespace kestrel::cpu
