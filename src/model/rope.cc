#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace kestrel {
namespace {

// theta^(-2i/D) for i < D/2, rounded to fp32 as transformers' inv_freq is (the scaled
// types start from this fp32 tensor there too).
std::vector<double> default_inv_freq(double theta, int D) {
  std::vector<double> f(D / 2);
  for (int i = 0; i < D / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(D);
    f[i] = static_cast<float>(1.0 / std::pow(theta, static_cast<double>(exponent)));
  }
  return f;
}

double yarn_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// Dimension index whose wavelength completes `rotations` turns over `max_pos` positions.
double yarn_correction_dim(double rotations, int D, double theta, double max_pos) {
  return D * std::log(max_pos / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(theta));
}

std::vector<double> yarn_inv_freq(const ModelConfig& c, double* attention_factor) {
  const RopeScaling& r = c.rope_scaling;
  const int D = c.head_dim;
  double factor = r.factor;
  double original = c.max_position_embeddings;
  if (r.original_max_position_embeddings) {
    original = *r.original_max_position_embeddings;
    factor = c.max_position_embeddings / original;
  }
  if (r.attention_factor) {
    *attention_factor = *r.attention_factor;
  } else if (r.mscale && r.mscale_all_dim && *r.mscale != 0 && *r.mscale_all_dim != 0) {
    *attention_factor = yarn_mscale(factor, *r.mscale) / yarn_mscale(factor, *r.mscale_all_dim);
  } else {
    *attention_factor = yarn_mscale(factor, 1.0);
  }
  double low = yarn_correction_dim(r.beta_fast, D, c.rope_theta, original);
  double high = yarn_correction_dim(r.beta_slow, D, c.rope_theta, original);
  if (r.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(D - 1));
  if (low == high) high += 0.001;  // as transformers: avoid dividing by zero

  const std::vector<double> extrapolation = default_inv_freq(c.rope_theta, D);
  std::vector<double> f(D / 2);
  for (int i = 0; i < D / 2; ++i) {
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    const double keep = 1.0 - ramp;  // weight of the unscaled (extrapolated) frequency
    f[i] = extrapolation[i] / factor * (1.0 - keep) + extrapolation[i] * keep;
  }
  return f;
}

std::vector<double> llama3_inv_freq(const ModelConfig& c) {
  const RopeScaling& r = c.rope_scaling;
  KS_CHECK(r.original_max_position_embeddings.has_value(),
           "rope type 'llama3' needs original_max_position_embeddings");
  const double old_len = *r.original_max_position_embeddings;
  const double low_wavelen = old_len / r.low_freq_factor;
  const double high_wavelen = old_len / r.high_freq_factor;
  std::vector<double> f = default_inv_freq(c.rope_theta, c.head_dim);
  for (double& x : f) {
    const double wavelen = 2.0 * std::numbers::pi / x;
    if (wavelen < high_wavelen) continue;  // high frequencies: unchanged
    if (wavelen > low_wavelen) {           // low frequencies: interpolated
      x /= r.factor;
      continue;
    }
    const double smooth =
        (old_len / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
    x = (1.0 - smooth) * x / r.factor + smooth * x;
  }
  return f;
}

}  // namespace

RopeFrequencies rope_frequencies(const ModelConfig& c) {
  const RopeScaling& r = c.rope_scaling;
  KS_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0,
           "rope: head_dim must be even and positive, got {}", c.head_dim);
  KS_CHECK(c.rope_theta > 0, "rope: rope_theta must be positive, got {}", c.rope_theta);
  KS_CHECK(c.max_position_embeddings > 0, "rope: max_position_embeddings must be positive, got {}",
           c.max_position_embeddings);
  KS_CHECK(r.type == "default" || r.factor > 0, "rope: factor must be positive, got {}", r.factor);
  RopeFrequencies out;
  out.num_positions = c.max_position_embeddings;
  double attention_factor = 1.0;
  std::vector<double> f;
  if (r.type == "default") {
    f = default_inv_freq(c.rope_theta, c.head_dim);
  } else if (r.type == "linear") {
    f = default_inv_freq(c.rope_theta, c.head_dim);
    for (double& x : f) x /= r.factor;
  } else if (r.type == "dynamic") {
    const int D = c.head_dim;
    const double base = c.rope_theta * std::pow(r.factor * r.factor - r.factor + 1.0,
                                                static_cast<double>(D) / (D - 2));
    f = default_inv_freq(base, D);
    out.num_positions = static_cast<int64_t>(c.max_position_embeddings * r.factor);
  } else if (r.type == "yarn") {
    f = yarn_inv_freq(c, &attention_factor);
  } else if (r.type == "llama3") {
    f = llama3_inv_freq(c);
  } else {
    throw_error("rope: unknown rope type '{}' (supported: default, linear, dynamic, yarn, llama3)",
                r.type);
  }
  out.inv_freq.assign(f.begin(), f.end());
  out.attention_factor = static_cast<float>(attention_factor);
  return out;
}

Tensor build_rope_table(const RopeFrequencies& freq) {
  const int half = static_cast<int>(freq.inv_freq.size());
  const int D = 2 * half;
  Tensor t = Tensor::host(DType::kF32, {freq.num_positions, D});
  float* p = t.data_as<float>();
  for (int64_t pos = 0; pos < freq.num_positions; ++pos) {
    float* row = p + pos * D;
    for (int i = 0; i < half; ++i) {
      const float angle = freq.inv_freq[i] * static_cast<float>(pos);
      row[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * freq.attention_factor;
      row[half + i] =
          static_cast<float>(std::sin(static_cast<double>(angle))) * freq.attention_factor;
    }
  }
  return t;
}

}  // namespace kestrel
