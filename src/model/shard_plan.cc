#include "model/shard_plan.h"

#include "core/error.h"

namespace kestrel {

ShardPlan ShardPlan::make(const ModelConfig& c, int rank, int world_size) {
  const int N = world_size;
  const int Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  KS_CHECK(N >= 1, "tensor_parallel_size must be at least 1, got {}", N);
  KS_CHECK(rank >= 0 && rank < N, "tensor-parallel rank {} is outside [0, {})", rank, N);
  KS_CHECK(Hq > 0 && Hkv > 0 && Hq % Hkv == 0 && c.intermediate_size > 0 && c.vocab_size > 0,
           "cannot shard a model of {} query heads, {} KV heads, MLP width {} and vocabulary {}",
           Hq, Hkv, c.intermediate_size, c.vocab_size);
  KS_CHECK(Hq % N == 0, "tensor_parallel_size {} does not divide the {} query heads of this model",
           N, Hq);
  KS_CHECK(c.intermediate_size % N == 0,
           "tensor_parallel_size {} does not divide the MLP width (intermediate_size) {} of this "
           "model",
           N, c.intermediate_size);
  if (N <= Hkv) {
    KS_CHECK(Hkv % N == 0, "tensor_parallel_size {} does not divide the {} KV heads of this model",
             N, Hkv);
  } else {
    KS_CHECK(N % Hkv == 0,
             "tensor_parallel_size {} is not a multiple of the {} KV heads of this model (with "
             "more ranks than KV heads, each KV head is replicated on the same number of ranks)",
             N, Hkv);
  }
  const int64_t V = c.vocab_size;
  int64_t Vp = (V + N - 1) / N;
  // Rounded up to whole sampler chunks where the last rank keeps a real id (every
  // vocabulary of more than (N - 1) kVocabAlign tokens).
  if (const int64_t aligned = (Vp + kVocabAlign - 1) / kVocabAlign * kVocabAlign;
      N > 1 && (N - 1) * aligned < V) {
    Vp = aligned;
  }
  // all_gather_columns drops padding from the last rank only, so that rank must still hold
  // at least one real token (only a vocabulary of at most N (N - 1) tokens can fail this).
  KS_CHECK((N - 1) * Vp < V,
           "the vocabulary of {} tokens is too small to split over {} ranks ({} per rank leaves "
           "the last rank none)",
           V, N, Vp);

  ShardPlan p;
  p.rank = rank;
  p.world_size = N;
  p.num_q_heads = Hq / N;
  p.q_head_start = rank * p.num_q_heads;
  if (N <= Hkv) {
    p.num_kv_heads = Hkv / N;
    p.kv_head_start = rank * p.num_kv_heads;
  } else {
    // N / Hkv consecutive ranks share one KV head: the one their query heads read (query
    // head h reads KV head h / (Hq / Hkv), and rank r's heads all fall in one such group).
    p.num_kv_heads = 1;
    p.kv_head_start = rank / (N / Hkv);
  }
  p.intermediate = c.intermediate_size / N;
  p.intermediate_start = rank * p.intermediate;
  p.vocab_per_rank = Vp;
  p.vocab_start = rank * Vp;
  return p;
}

}  // namespace kestrel
