// Reading the RoPE settings of a config.json (internal to the io module).
#pragma once

#include <nlohmann/json.hpp>

#include "io/model_config.h"

namespace kestrel {

// Fills c->rope_theta and c->rope_scaling from `j`: the transformers-4 form (top-level
// `rope_theta`, `rope_scaling` null or {"type"|"rope_type": ..}) or the transformers-5 form
// (`rope_parameters`: {"rope_type": .., "rope_theta": .., ...}), which wins when both exist.
// Throws kestrel::Error naming an unknown rope type or a missing/invalid parameter.
void parse_rope(const nlohmann::json& j, ModelConfig* c);

}  // namespace kestrel
