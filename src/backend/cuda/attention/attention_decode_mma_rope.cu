// The tensor-core decode kernel (attention_decode_mma.cuh) with qk_norm_rope_store fused in,
// as paged_attention_rope runs it: a translation unit of its own, so that a 2-core machine
// compiles its instantiations beside the plain kernel's.
#include <cstdlib>

#include "backend/cuda/attention/attention_decode_mma.cuh"
#include "backend/cuda/launch.h"

namespace kestrel::kernels::detail {

bool use_decode_mma_rope(const PagedAttentionArgs& a) {
  if (!use_decode_mma(a)) return false;
  // By default, batches whose CTAs (one per sequence and KV head) fit one wave.
  const char* env = std::getenv("KESTREL_DECODE_MMA_ROPE");
  const int64_t max_seqs = env != nullptr ? std::atoll(env)
                                          : int64_t(multiprocessor_count()) * kDecodeMmaCtasPerSm / a.num_kv_heads;
  if (a.num_seqs > max_seqs) return false;
  const int group = a.num_q_heads / a.num_kv_heads;
  const int max_group = a.head_dim == 64 ? (a.kv.fp8 ? fused_max_group<64, true>() : fused_max_group<64, false>())
                                         : (a.kv.fp8 ? fused_max_group<128, true>() : fused_max_group<128, false>());
  return group <= max_group;
}

void decode_mma_attention_rope(const PagedAttentionArgs& a, const QkNormRopeArgs& rope,
                               const AttentionSplit& split, float* part_ml, float* part_acc,
                               cudaStream_t stream) {
  launch_for<true>(a, rope, split, part_ml, part_acc, stream);
}

}  // namespace kestrel::kernels::detail
