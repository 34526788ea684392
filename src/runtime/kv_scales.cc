#include "runtime/kv_scales.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/fp8.h"

namespace kestrel {
namespace {

// A checkpoint scale tensor as f32 values: one, or one per KV head.
std::vector<float> read_scale(const WeightStore& weights, const std::string& name, int num_kv_heads) {
  const TensorInfo& t = weights.get(name);
  KS_CHECK(t.dtype == DType::kF32 || t.dtype == DType::kF16 || t.dtype == DType::kBF16,
           "KV cache scale '{}' has dtype {}; expected F32, F16 or BF16", name,
           dtype_name(t.dtype));
  const int64_t n = t.shape.numel();
  KS_CHECK(n == 1 || n == num_kv_heads,
           "KV cache scale '{}' has shape {}; expected one value or one per KV head ({})", name,
           t.shape.str(), num_kv_heads);
  std::vector<char> bytes(t.nbytes);  // the mapping may leave it unaligned
  std::memcpy(bytes.data(), t.data, t.nbytes);
  std::vector<float> v(n);
  convert_to_f32(bytes.data(), t.dtype, v.data(), n);
  for (float x : v) {
    KS_CHECK(std::isfinite(x) && x > 0.0f,
             "KV cache scale '{}' holds {}; a scale must be finite and positive", name, x);
  }
  return v;
}

// Value of global head h from a scale of one value or one per head.
float head_value(const std::vector<float>& v, int h) { return v.size() == 1 ? v[0] : v[h]; }

}  // namespace

float round_up_pow2(float x) {
  int e = 0;
  const float m = std::frexp(x, &e);  // x = m 2^e, m in [0.5, 1)
  return std::ldexp(1.0f, m == 0.5f ? e - 1 : e);
}

float calibrated_kv_scale(float amax) {
  KS_CHECK(std::isfinite(amax) && amax >= 0.0f,
           "KV cache calibration: the model stored a value of magnitude {} (not finite)", amax);
  const double want = amax * kKvCalibrationHeadroom / kE4M3Max;
  if (want <= kMinKvScale) return kMinKvScale;
  return round_up_pow2(static_cast<float>(want));
}

std::optional<KvScales> checkpoint_kv_scales(const WeightStore& weights, const ModelConfig& config,
                                             const ShardPlan& plan) {
  const int L = config.num_hidden_layers, Hkv = plan.num_kv_heads;
  KvScales scales(L);
  int found = 0;
  std::string missing;
  for (int l = 0; l < L; ++l) {
    const std::string prefix = fmt::format("model.layers.{}.self_attn.", l);
    const bool k = weights.has(prefix + "k_scale"), v = weights.has(prefix + "v_scale");
    const bool kv = weights.has(prefix + "kv_scale");
    KS_CHECK(k == v, "the checkpoint has {}{} but not {}{}", prefix, k ? "k_scale" : "v_scale",
             prefix, k ? "v_scale" : "k_scale");
    if (!k && !kv) {
      if (missing.empty()) missing = prefix + "k_scale";
      continue;
    }
    ++found;
    const std::vector<float> ks = read_scale(weights, prefix + (k ? "k_scale" : "kv_scale"),
                                             config.num_key_value_heads);
    const std::vector<float> vs = read_scale(weights, prefix + (k ? "v_scale" : "kv_scale"),
                                             config.num_key_value_heads);
    scales[l].resize(2 * Hkv);
    for (int j = 0; j < Hkv; ++j) {
      const int h = plan.kv_head_start + j;
      scales[l][j] = round_up_pow2(head_value(ks, h));
      scales[l][Hkv + j] = round_up_pow2(head_value(vs, h));
    }
  }
  if (found == 0) return std::nullopt;
  KS_CHECK(found == L,
           "the checkpoint has KV cache scales for {} of {} layers (no {} nor its kv_scale); "
           "give every layer k_scale and v_scale, or none",
           found, L, missing);
  for (const auto& layer : scales) {
    for (float s : layer) {
      KS_CHECK(std::isfinite(s), "a KV cache scale rounds up to infinity (too large for f32)");
    }
  }
  return scales;
}

void set_kv_scales(Backend& backend, std::vector<LayerKvCache>& kv, const KvScales& scales) {
  KS_ASSERT(scales.size() == kv.size(), "{} layers of scales for {} cache layers", scales.size(),
            kv.size());
  for (size_t l = 0; l < kv.size(); ++l) {
    KS_ASSERT(kv[l].fp8() && static_cast<int64_t>(scales[l].size()) == kv[l].scale.numel(),
              "layer {}: {} scales for a cache of {}", l, scales[l].size(), kv[l].scale.numel());
    Tensor s = Tensor::host(DType::kF32, kv[l].scale.shape());
    std::copy(scales[l].begin(), scales[l].end(), s.data_as<float>());
    backend.copy_from_host(s, kv[l].scale);
    backend.copy_from_host(Tensor::host(DType::kF32, kv[l].amax.shape()), kv[l].amax);
    backend.copy_from_host(Tensor::host(DType::kI64, kv[l].clamped.shape()), kv[l].clamped);
  }
}

KvScales calibrate_kv_scales(Backend& backend, std::vector<LayerKvCache>& kv,
                             const std::function<void()>& prompt) {
  prompt();
  KvScales scales(kv.size());
  for (size_t l = 0; l < kv.size(); ++l) {
    Tensor amax = Tensor::host(DType::kF32, kv[l].amax.shape());
    backend.copy_to_host(kv[l].amax, amax);
    for (int64_t i = 0; i < amax.numel(); ++i) {
      scales[l].push_back(calibrated_kv_scale(amax.data_as<float>()[i]));
    }
  }
  return scales;
}

int64_t kv_clamped_total(Backend& backend, const std::vector<LayerKvCache>& kv) {
  int64_t total = 0;
  for (const LayerKvCache& layer : kv) {
    if (!layer.fp8()) continue;
    Tensor c = Tensor::host(DType::kI64, layer.clamped.shape());
    backend.copy_to_host(layer.clamped, c);
    for (int64_t i = 0; i < c.numel(); ++i) total += c.data_as<int64_t>()[i];
  }
  return total;
}

std::string describe_kv_scales(const KvScales& scales) {
  float lo[2] = {INFINITY, INFINITY}, hi[2] = {0.0f, 0.0f};
  for (const auto& layer : scales) {
    const size_t heads = layer.size() / 2;
    for (size_t i = 0; i < layer.size(); ++i) {
      const int kv = i < heads ? 0 : 1;
      lo[kv] = std::min(lo[kv], layer[i]);
      hi[kv] = std::max(hi[kv], layer[i]);
    }
  }
  auto exp2 = [](float s) { return std::ilogb(s); };
  return fmt::format("K 2^{}..2^{}, V 2^{}..2^{}", exp2(lo[0]), exp2(hi[0]), exp2(lo[1]),
                     exp2(hi[1]));
}

}  // namespace kestrel
