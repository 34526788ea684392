// The decode kernel's merge of its key splits (attention_decode.cu), done by the last CTA of
// each (sequence, KV head, part) to finish.
#pragma once

#include <cfloat>
#include <cstdint>

#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/kernels.h"

namespace kestrel::kernels::detail {

// out[row0 + r] = sum_z acc_z 2^(m_z - M) / sum_z l_z 2^(m_z - M) over the num_active splits,
// for the CTA's rows r < num_rows, by the kThreads threads of the CTA; `smem` holds
// kSmemBytes. Every load of a chunk of splits is issued at once (staged in shared memory),
// so the merge costs one or two round trips to L2, not one per split.
template <int D, int kRows, int kThreads, int kSmemBytes>
__device__ __forceinline__ void merge_splits(const PagedAttentionArgs& a, int num_active,
                                             int64_t rows, int64_t row0, int num_rows,
                                             const float* part_ml, const float* part_acc,
                                             float* smem) {
  constexpr int kOut = (kRows * D + kThreads - 1) / kThreads;  // outputs per thread
  constexpr int kChunk = kSmemBytes / 4 / (kRows * D);         // splits staged at once (>= 1)
  static_assert(kChunk >= 1, "the ring holds one split's partial outputs");
  __shared__ float2 s_ml[kMaxAttentionSplits * kRows];
  const int tid = threadIdx.x;
  const int elems = num_rows * D;  // one split's partial outputs for these rows: contiguous
  // Splits [z0, z0 + n) into smem by cp.async (L2, where the other CTAs' writes are).
  auto stage = [&](int z0, int n) {
    const int vecs = elems / 4;
    for (int i = tid; i < n * vecs; i += kThreads) {
      const int z = z0 + i / vecs;
      cp_async_16<CopyCache::kL2>(smem + 4 * i, part_acc + (z * rows + row0) * D + 4 * (i % vecs), true);
    }
    cp_async_commit();
  };
  stage(0, min(kChunk, num_active));
  for (int i = tid; i < num_active * num_rows; i += kThreads) {
    const int64_t p = (i / num_rows) * rows + row0 + i % num_rows;
    s_ml[i] = __ldcg(reinterpret_cast<const float2*>(part_ml) + p);
  }
  float mx[kOut], sum[kOut], o[kOut];
  cp_async_wait_all();
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kOut; ++k) {
    const int r = min((tid + k * kThreads) / D, num_rows - 1);
    mx[k] = -FLT_MAX;
    for (int z = 0; z < num_active; ++z) mx[k] = fmaxf(mx[k], s_ml[z * num_rows + r].x);
    sum[k] = 0.0f;
    for (int z = 0; z < num_active; ++z) {
      sum[k] += s_ml[z * num_rows + r].y * exp2f(s_ml[z * num_rows + r].x - mx[k]);
    }
    o[k] = 0.0f;
  }
  for (int z0 = 0; z0 < num_active; z0 += kChunk) {
    const int n = min(kChunk, num_active - z0);
    if (z0 > 0) {
      __syncthreads();
      stage(z0, n);
      cp_async_wait_all();
      __syncthreads();
    }
#pragma unroll
    for (int k = 0; k < kOut; ++k) {
      const int e = tid + k * kThreads;
      if (e >= elems) break;
      const int r = e / D;
      for (int z = 0; z < n; ++z) {
        o[k] += smem[z * elems + e] * exp2f(s_ml[(z0 + z) * num_rows + r].x - mx[k]);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kOut; ++k) {
    const int e = tid + k * kThreads;
    if (e < elems) a.out[(row0 + e / D) * D + e % D] = __float2bfloat16(o[k] / sum[k]);
  }
}

}  // namespace kestrel::kernels::detail
