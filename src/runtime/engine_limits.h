// The one resolution of what the engine runs with: EngineConfig, the loaded model and the
// device (the runner sized the KV cache from its memory) into EngineLimits. LLM and the GPU
// tests' engine both build their LLMEngine from it.
#pragma once

#include <string>
#include <vector>

#include "engine/llm_engine.h"
#include "kestrel/engine_config.h"
#include "runtime/model_runner.h"

namespace kestrel {

// EngineConfig::kv_cache_dtype resolved: false for "auto" and "bf16" (the backend's
// unquantized cache, its compute dtype: BF16 on CUDA, F32 on the CPU), true for "fp8" and
// "fp8_e4m3" (the e4m3 cache, kv_scales.h). Lowercase only, as vLLM spells them. Throws
// kestrel::Error naming the accepted values for anything else. The runner calls it before
// it loads anything.
bool kv_cache_is_fp8(const std::string& kv_cache_dtype);

// Throws kestrel::Error when max_model_len exceeds the model's max_position_embeddings.
EngineLimits resolve_engine_limits(const EngineConfig& config, const ModelRunner& runner,
                                   std::vector<int> eos_token_ids);

}  // namespace kestrel
