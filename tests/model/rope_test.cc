// RoPE frequencies and tables against values derived by hand from transformers'
// modeling_rope_utils formulas (worked out in the comments), on head_dim 4 or 8 where every
// band and ramp value can be followed on paper.
#include "model/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace kestrel {
namespace {

ModelConfig base_config(int head_dim, int max_pos = 2048) {
  ModelConfig c;
  c.head_dim = head_dim;
  c.rope_theta = 10000.0;
  c.max_position_embeddings = max_pos;
  return c;
}

void expect_freqs(const RopeFrequencies& f, const std::vector<double>& want) {
  ASSERT_EQ(f.inv_freq.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(f.inv_freq[i], want[i], 1e-6 * want[i]) << "inv_freq[" << i << "]";
  }
}

TEST(Rope, DefaultFrequenciesAndTable) {
  // D = 4: inv_freq = 10000^(-0/4), 10000^(-2/4) = 1, 0.01.
  RopeFrequencies f = rope_frequencies(base_config(4, 100));
  expect_freqs(f, {1.0, 0.01});
  EXPECT_EQ(f.attention_factor, 1.0f);
  EXPECT_EQ(f.num_positions, 100);
  Tensor t = build_rope_table(f);
  ASSERT_EQ(t.shape(), (Shape{100, 4}));
  const float* row = t.data_as<float>() + 3 * 4;  // position 3
  EXPECT_NEAR(row[0], std::cos(3.0), 1e-6);
  EXPECT_NEAR(row[1], std::cos(0.03), 1e-6);
  EXPECT_NEAR(row[2], std::sin(3.0), 1e-6);
  EXPECT_NEAR(row[3], std::sin(0.03), 1e-6);
  const float* zero = t.data_as<float>();
  EXPECT_EQ(zero[0], 1.0f);
  EXPECT_EQ(zero[2], 0.0f);
}

TEST(Rope, LinearDividesByFactor) {
  ModelConfig c = base_config(4);
  c.rope_scaling.type = "linear";
  c.rope_scaling.factor = 2.0;
  expect_freqs(rope_frequencies(c), {0.5, 0.005});
}

TEST(Rope, DynamicUsesOneTableForTheScaledContext) {
  // vLLM's form: base' = 10000 * (f^2 - f + 1)^(D/(D-2)) = 10000 * 3^2 = 90000 for f = 2,
  // D = 4; inv_freq = 1, 90000^(-1/2) = 1/300; table of 2048 * 2 positions.
  ModelConfig c = base_config(4);
  c.rope_scaling.type = "dynamic";
  c.rope_scaling.factor = 2.0;
  RopeFrequencies f = rope_frequencies(c);
  expect_freqs(f, {1.0, 1.0 / 300.0});
  EXPECT_EQ(f.num_positions, 4096);
}

TEST(Rope, Llama3Bands) {
  // D = 8: inv_freq = 1, 0.1, 0.01, 0.001; wavelengths 2 pi / inv_freq = 6.28, 62.8, 628.3,
  // 6283. old_len 1000, low 1, high 4: high-frequency band < 250 (unchanged), low-frequency
  // band > 1000 (divided by 8), 628.3 in between: smooth = (1000 / 628.3 - 1) / 3.
  ModelConfig c = base_config(8, 8000);
  c.rope_scaling.type = "llama3";
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 1000;
  const double wl = 2 * std::numbers::pi / 0.01;
  const double s = (1000.0 / wl - 1.0) / 3.0;
  expect_freqs(rope_frequencies(c), {1.0, 0.1, (1 - s) * 0.01 / 8 + s * 0.01, 0.001 / 8});
  c.rope_scaling.original_max_position_embeddings.reset();
  EXPECT_THROW(rope_frequencies(c), Error);
}

TEST(Rope, YarnRampAndAttentionFactor) {
  // D = 8, factor 4, no original_max_position_embeddings: ramp on max_position 2048.
  // correction dim(r) = 8 ln(2048 / (2 pi r)) / (2 ln 10000): r = 32 -> 1.008 (floor 1),
  // r = 1 -> 2.513 (ceil 3). ramp(i) = clamp((i - 1) / 2) = 0, 0, 0.5, 1 and
  // inv_freq = extrap (1 - ramp) + extrap / 4 ramp. Attention factor 0.1 ln 4 + 1.
  ModelConfig c = base_config(8, 2048);
  c.rope_scaling.type = "yarn";
  c.rope_scaling.factor = 4.0;
  RopeFrequencies f = rope_frequencies(c);
  expect_freqs(f, {1.0, 0.1, 0.01 * (0.5 + 0.5 / 4), 0.001 / 4});
  EXPECT_NEAR(f.attention_factor, 0.1 * std::log(4.0) + 1.0, 1e-6);

  // The table scales cos and sin by the attention factor.
  Tensor t = build_rope_table(f);
  const float* row = t.data_as<float>() + 5 * 8;
  EXPECT_NEAR(row[1], std::cos(0.5) * f.attention_factor, 1e-6);
  EXPECT_NEAR(row[4 + 3], std::sin(5 * 0.001 / 4) * f.attention_factor, 1e-6);

  // Without truncation the range is [1.008, 2.513]: ramp(2) = (2 - 1.008) / 1.505.
  c.rope_scaling.truncate = false;
  auto dim = [](double r, double len) {
    return 8 * std::log(len / (2 * std::numbers::pi * r)) / (2 * std::log(10000.0));
  };
  const double lo = dim(32, 2048), hi = dim(1, 2048);
  const double r2 = (2 - lo) / (hi - lo);
  const double r1 = (1 - lo) / (hi - lo);  // slightly negative: clamped to 0
  ASSERT_LT(r1, 0.0);
  expect_freqs(rope_frequencies(c), {1.0, 0.1, 0.01 * (1 - r2) + 0.01 / 4 * r2, 0.001 / 4});
}

TEST(Rope, YarnOriginalMaxPositionOverridesFactor) {
  // transformers: with original_max_position_embeddings 512 and max_position_embeddings
  // 2048 the factor becomes 2048 / 512 = 4 whatever rope_scaling.factor says, and the ramp
  // uses 512: dims 0.406 (floor 0) and 1.911 (ceil 2), ramp = 0, 0.5, 1, 1.
  ModelConfig c = base_config(8, 2048);
  c.rope_scaling.type = "yarn";
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.original_max_position_embeddings = 512;
  RopeFrequencies f = rope_frequencies(c);
  expect_freqs(f, {1.0, 0.1 * 0.5 + 0.1 / 4 * 0.5, 0.01 / 4, 0.001 / 4});
  EXPECT_NEAR(f.attention_factor, 0.1 * std::log(4.0) + 1.0, 1e-6);

  // mscale / mscale_all_dim: (0.1 * 1 * ln 4 + 1) / (0.1 * 0.5 * ln 4 + 1).
  c.rope_scaling.mscale = 1.0;
  c.rope_scaling.mscale_all_dim = 0.5;
  EXPECT_NEAR(rope_frequencies(c).attention_factor,
              (0.1 * std::log(4.0) + 1) / (0.05 * std::log(4.0) + 1), 1e-6);
  // An explicit attention_factor wins.
  c.rope_scaling.attention_factor = 0.75;
  EXPECT_NEAR(rope_frequencies(c).attention_factor, 0.75, 1e-7);
}

TEST(Rope, RejectsUnknownType) {
  ModelConfig c = base_config(8);
  c.rope_scaling.type = "longrope";
  EXPECT_THROW(rope_frequencies(c), Error);
}

}  // namespace
}  // namespace kestrel
