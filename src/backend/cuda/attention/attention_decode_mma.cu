// The tensor-core decode kernel (attention_decode_mma.cuh) as paged_attention runs it: q from
// its own buffer, after qk_norm_rope_store has stored the new K/V.
#include <cstdlib>

#include "backend/cuda/attention/attention_decode_mma.cuh"

namespace kestrel::kernels::detail {

bool use_decode_mma(const PagedAttentionArgs& a) {
  if (!use_decode_kernel(a) || (a.head_dim != 64 && a.head_dim != 128) ||
      a.num_q_heads / a.num_kv_heads > 16) {
    return false;
  }
  if (a.kv.fp8) return true;
  // Read at each launch, so that benchmarks and tests can compare the two kernels: 0 turns
  // the bf16 use off, N > 0 moves the threshold to N sequences.
  const char* env = std::getenv("KESTREL_DECODE_MMA_BF16");
  const int min_seqs = env == nullptr ? kDecodeMmaMinBf16Seqs : std::atoi(env);
  return min_seqs > 0 && a.num_seqs >= min_seqs;
}

int decode_mma_ctas_per_sm(const PagedAttentionArgs& a, int num_sms) {
  return with_kernel_config(a, num_sms, [](auto d, auto fp8, auto stages) {
    return ctas_per_sm<decltype(d)::value, decltype(fp8)::value, decltype(stages)::value>();
  });
}

void decode_mma_attention(const PagedAttentionArgs& a, const AttentionSplit& split,
                          float* part_ml, float* part_acc, cudaStream_t stream) {
  launch_for<false>(a, QkNormRopeArgs{}, split, part_ml, part_acc, stream);
}

}  // namespace kestrel::kernels::detail
