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
  const int num_sms = multiprocessor_count();
  const int64_t max_seqs = env != nullptr ? std::atoll(env)
                                          : int64_t(num_sms) * decode_mma_ctas_per_sm(a, num_sms) / a.num_kv_heads;
  if (a.num_seqs > max_seqs) return false;
  const int max_group = with_kernel_config(a, num_sms, [](auto d, auto fp8, auto stages) {
    return fused_max_group<decltype(d)::value, decltype(fp8)::value, decltype(stages)::value>();
  });
  return a.num_q_heads / a.num_kv_heads <= max_group;
}

void decode_mma_attention_rope(const PagedAttentionArgs& a, const QkNormRopeArgs& rope,
                               const AttentionSplit& split, float* part_ml, float* part_acc,
                               cudaStream_t stream) {
  launch_for<true>(a, rope, split, part_ml, part_acc, stream);
}

}  // namespace kestrel::kernels::detail
