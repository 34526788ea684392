// The scales of an fp8 KV cache (LayerKvCache's contract in backend/backend.h: x is stored
// as e4m3(x / scale), read as e4m3 x scale, one power-of-two scale per layer, K or V, and
// KV head). Where they come from (docs/kv_cache.md):
//
// From the checkpoint, when it carries them: per layer l,
//   model.layers.{l}.self_attn.k_scale and model.layers.{l}.self_attn.v_scale
// (vLLM's names and convention, dequantized = fp8 x scale), or the older
//   model.layers.{l}.self_attn.kv_scale (one tensor for both K and V),
// each one element (the whole layer) or [num_key_value_heads] (one per KV head). Each
// value is rounded up to a power of two: a scale that grows never makes a value overflow
// that the checkpoint's scale kept in range.
//
// Otherwise from a calibration pass at start-up (ModelRunner): one prompt stored with
// every scale 1, then scale = the smallest power of two >= amax x 4 / 448 per (layer, K or
// V, head), at least 2^-10. The headroom of 4 leaves room for later prompts whose values
// exceed the calibration prompt's; what still exceeds 448 x scale is clamped and counted.
// The floor keeps a head that stored only zeros (amax 0) able to hold values up to 0.44.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "model/shard_plan.h"

namespace kestrel {

// Per layer, 2 x num_kv_heads scales: this rank's K heads, then its V heads (the layout of
// LayerKvCache::scale).
using KvScales = std::vector<std::vector<float>>;

constexpr double kKvCalibrationHeadroom = 4.0;
constexpr float kMinKvScale = 0x1p-10f;
// Tokens of the calibration prompt, at most (fewer when max_model_len or the cache is
// smaller; it runs in chunks of the step budget).
constexpr int kKvCalibrationTokens = 512;

// The smallest power of two >= x. REQUIRES: x finite and positive.
float round_up_pow2(float x);

// The calibration rule: max(kMinKvScale, round_up_pow2(amax x headroom / 448)). Throws
// kestrel::Error when amax is negative or not finite (the model produced inf or NaN).
float calibrated_kv_scale(float amax);

// The checkpoint's scales for this rank's KV heads (plan), rounded up to powers of two;
// nullopt when it has none of the names above. Throws kestrel::Error naming the tensor when
// only some layers have them, when one has neither 1 nor num_key_value_heads elements, is
// not a float type, or holds a value that is not finite and positive.
std::optional<KvScales> checkpoint_kv_scales(const WeightStore& weights, const ModelConfig& config,
                                             const ShardPlan& plan);

// Sets every layer's scales (copy_from_host) and zeros its amax and clamped counters.
// REQUIRES: an fp8 cache; scales.size() == kv.size(), each of 2 x num_kv_heads.
void set_kv_scales(Backend& backend, std::vector<LayerKvCache>& kv, const KvScales& scales);

// Runs `prompt`, a forward that stores into `kv` while every scale is 1 (as
// allocate_kv_cache leaves them), and returns calibrated_kv_scale() of the amax it left
// per (layer, K or V, head). Sets nothing: pass the result to set_kv_scales().
KvScales calibrate_kv_scales(Backend& backend, std::vector<LayerKvCache>& kv,
                             const std::function<void()>& prompt);

// Values stored with |x / scale| > 448 over every layer, K and V, and head of `kv` since the
// scales were set. Reads the device's counters: waits for the work queued before it.
int64_t kv_clamped_total(Backend& backend, const std::vector<LayerKvCache>& kv);

// "K 2^-4..2^1, V 2^-6..2^-2": the range of the scales, for the log.
std::string describe_kv_scales(const KvScales& scales);

}  // namespace kestrel
