// The decode kernel's merge of its key splits (attention_decode.cu), done by the last CTA of
// each (sequence, KV head, part) to finish.
#pragma once

#include <cfloat>
#include <cstdint>

#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.h"

namespace kestrel::kernels::detail {

// out[row0 + r] = sum_z acc_z 2^(m_z - M) / sum_z l_z 2^(m_z - M) over the num_active splits,
// for the CTA's rows r < num_rows, by the kThreads threads of the CTA; `smem` holds
// kSmemBytes. Every load of a chunk of splits is issued at once (staged in shared memory),
// so the merge costs one or two round trips to L2, not one per split. The weights
// 2^(m_z - M) are computed once per (split, row), by one warp per row with lane z holding
// split z: computing them per output element instead (kRows D x num_active exp2f, in
// dependent chains) made this merge 6.4 us of a 12 us decode kernel at batch 1 on an H100
// (docs/cuda_backend.md, "Where the batch-1 layer's time goes").
template <int D, int kRows, int kThreads, int kSmemBytes>
__device__ __forceinline__ void merge_splits(const PagedAttentionArgs& a, int num_active,
                                             int64_t rows, int64_t row0, int num_rows,
                                             const float* part_ml, const float* part_acc,
                                             float* smem) {
  constexpr int kOut = (kRows * D + kThreads - 1) / kThreads;  // outputs per thread
  constexpr int kChunk = kSmemBytes / 4 / (kRows * D);         // splits staged at once (>= 1)
  static_assert(kChunk >= 1, "the ring holds one split's partial outputs");
  static_assert(kMaxAttentionSplits <= 32, "one lane per split");
  __shared__ float s_p[kMaxAttentionSplits * kRows];  // [z][r]: 2^(m_z - M_r)
  __shared__ float s_sum[kRows];                      // sum_z l_z 2^(m_z - M_r)
  const int tid = threadIdx.x, lane = tid % 32;
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
  for (int r = tid / 32; r < num_rows; r += kThreads / 32) {
    float2 ml = make_float2(-FLT_MAX, 0.0f);
    if (lane < num_active) ml = __ldcg(reinterpret_cast<const float2*>(part_ml) + lane * rows + row0 + r);
    const float mx = warp_max(ml.x);
    const float p = lane < num_active ? exp2f(ml.x - mx) : 0.0f;
    const float sum = warp_sum(ml.y * p);
    if (lane < num_active) s_p[lane * kRows + r] = p;
    if (lane == 0) s_sum[r] = sum;
  }
  float o[kOut];
#pragma unroll
  for (int k = 0; k < kOut; ++k) o[k] = 0.0f;
  cp_async_wait_all();
  __syncthreads();
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
#pragma unroll 4
      for (int z = 0; z < n; ++z) o[k] += smem[z * elems + e] * s_p[(z0 + z) * kRows + r];
    }
  }
#pragma unroll
  for (int k = 0; k < kOut; ++k) {
    const int e = tid + k * kThreads;
    if (e < elems) a.out[(row0 + e / D) * D + e % D] = __float2bfloat16(o[k] / s_sum[e / D]);
  }
}

}  // namespace kestrel::kernels::detail
