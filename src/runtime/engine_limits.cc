#include "runtime/engine_limits.h"

#include "core/error.h"

namespace kestrel {

bool kv_cache_is_fp8(const std::string& kv_cache_dtype) {
  if (kv_cache_dtype == "auto" || kv_cache_dtype == "bf16") return false;
  if (kv_cache_dtype == "fp8" || kv_cache_dtype == "fp8_e4m3") return true;
  throw_error("kv_cache_dtype must be one of auto, bf16, fp8, fp8_e4m3; got '{}'",
              kv_cache_dtype);
}

EngineLimits resolve_engine_limits(const EngineConfig& config, const ModelRunner& runner,
                                   std::vector<int> eos_token_ids) {
  const ModelConfig& model = runner.model_config();
  EngineLimits limits;
  limits.max_num_seqs = config.max_num_seqs;
  limits.max_num_batched_tokens = config.max_num_batched_tokens;
  limits.max_model_len = runner.max_model_len();
  KS_CHECK(limits.max_model_len <= model.max_position_embeddings,
           "max_model_len {} exceeds the model's max_position_embeddings {}", limits.max_model_len,
           model.max_position_embeddings);
  limits.enable_chunked_prefill = config.enable_chunked_prefill;
  limits.eos_token_ids = std::move(eos_token_ids);
  limits.block_size = runner.block_size();
  limits.num_kv_blocks = runner.num_kv_blocks();
  limits.enable_prefix_caching = config.enable_prefix_caching;
  limits.vocab_size = model.vocab_size;
  limits.seed = config.seed;
  limits.async_scheduling = config.async_scheduling;
  return limits;
}

}  // namespace kestrel
