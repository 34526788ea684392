// Rotary position embedding tables, following transformers' modeling_rope_utils.
//
// The table is F32 [num_positions, head_dim]: row p holds cos(p * inv_freq[i]) * a in
// columns [0, D/2) and sin(p * inv_freq[i]) * a in [D/2, D), where a is the attention factor
// (1 except for yarn). This is the cos_sin argument of Backend::qk_norm_rope_store.
//
// Rope types (ModelConfig::rope_scaling.type):
//   default  inv_freq[i] = theta^(-2i/D)
//   linear   default / factor
//   dynamic  NTK-aware base, computed once for the longest context the table covers, as vLLM
//            does: base' = theta * (factor^2 - factor + 1)^(D/(D-2)) over
//            max_position_embeddings * factor positions. Transformers instead recomputes
//            the base from each forward's length and uses the plain default frequencies for
//            sequences within max_position_embeddings, which a paged cache cannot reproduce
//            (keys would be rotated with different frequencies at different steps).
//   yarn     transformers' _compute_yarn_parameters: interpolation / extrapolation blended
//            by a linear ramp between the correction dims of beta_fast and beta_slow
//            (floored/ceiled unless truncate is false); when rope_scaling has
//            original_max_position_embeddings, factor is replaced by
//            max_position_embeddings / original_max_position_embeddings, as transformers
//            does. Attention factor: attention_factor, else mscale / mscale_all_dim ratio,
//            else 0.1 ln(factor) + 1.
//   llama3   transformers' _compute_llama3_parameters (wavelength bands with smoothing).
// Angles are formed as float(inv_freq) * float(p) in fp32 like transformers, so the table
// matches its cos/sin to rounding.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "io/model_config.h"

namespace kestrel {

struct RopeFrequencies {
  std::vector<float> inv_freq;    // [head_dim / 2]
  float attention_factor = 1.0f;  // multiplies cos and sin
  int64_t num_positions = 0;      // rows of the table: positions 0 .. num_positions - 1
};

// Throws kestrel::Error for an unknown type or unusable parameters (non-positive factor,
// llama3 without original_max_position_embeddings).
RopeFrequencies rope_frequencies(const ModelConfig& config);

// Host F32 [freq.num_positions, head_dim] as described above.
Tensor build_rope_table(const RopeFrequencies& freq);

}  // namespace kestrel
