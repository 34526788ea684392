// The one resolution of what the engine runs with: EngineConfig, the loaded model and the
// device (the runner sized the KV cache from its memory) into EngineLimits. LLM and the GPU
// tests' engine both build their LLMEngine from it.
#pragma once

#include <vector>

#include "engine/llm_engine.h"
#include "kestrel/engine_config.h"
#include "runtime/model_runner.h"

namespace kestrel {

// Throws kestrel::Error when max_model_len exceeds the model's max_position_embeddings.
EngineLimits resolve_engine_limits(const EngineConfig& config, const ModelRunner& runner,
                                   std::vector<int> eos_token_ids);

}  // namespace kestrel
