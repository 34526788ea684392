// The fused small-step ops of the CUDA backend (norm_linear, linear_add,
// silu_mul_linear_add; gemv_fused.h; and layer_tail, their chain in one kernel, gemv_chain.h)
// against double-precision references written here that round to bf16 where the unfused ops
// round (rms_norm, silu_mul, the product, the residual add), over odd shapes, with and
// without bias, and past the kernel's shared-memory limit (the unfused fallback).
#include <gtest/gtest.h>

#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "cuda_test_util.h"

namespace kestrel {
namespace {

using namespace cuda_test;

double round_bf16(double v) { return bf16_to_f32(f32_to_bf16(static_cast<float>(v))); }

// x' [t, k] rows as the fused prologues define them.
std::vector<double> normed_rows(const std::vector<double>& x, const Bf16Data& nw, int t, int k,
                                double eps) {
  std::vector<double> out(size_t(t) * k);
  for (int i = 0; i < t; ++i) {
    double ss = 0;
    for (int c = 0; c < k; ++c) ss += x[size_t(i) * k + c] * x[size_t(i) * k + c];
    const double inv = 1.0 / std::sqrt(ss / k + eps);
    for (int c = 0; c < k; ++c) {
      out[size_t(i) * k + c] = round_bf16(nw.values[c] * round_bf16(x[size_t(i) * k + c] * inv));
    }
  }
  return out;
}

std::vector<double> silu_rows(const std::vector<double>& gate_up, int t, int k) {
  std::vector<double> out(size_t(t) * k);
  for (int i = 0; i < t; ++i) {
    for (int c = 0; c < k; ++c) {
      const double g = gate_up[size_t(i) * 2 * k + c];
      const double u = gate_up[size_t(i) * 2 * k + k + c];
      out[size_t(i) * k + c] = round_bf16(round_bf16(g / (1.0 + std::exp(-g))) * u);
    }
  }
  return out;
}

// x' w^T (+ bias) in double.
std::vector<double> product(const std::vector<double>& xs, const Bf16Data& w, const Bf16Data* bias,
                            int t, int n, int k) {
  std::vector<double> out(size_t(t) * n);
  for (int i = 0; i < t; ++i) {
    for (int j = 0; j < n; ++j) {
      double s = bias != nullptr ? bias->values[j] : 0.0;
      for (int c = 0; c < k; ++c) s += xs[size_t(i) * k + c] * w.values[size_t(j) * k + c];
      out[size_t(i) * n + j] = s;
    }
  }
  return out;
}

std::vector<double> added(const std::vector<double>& residual, const std::vector<double>& p) {
  std::vector<double> out(p.size());
  for (size_t i = 0; i < p.size(); ++i) out[i] = round_bf16(residual[i] + round_bf16(p[i]));
  return out;
}

std::vector<double> rounded(std::vector<double> v) {
  for (double& x : v) x = round_bf16(x);
  return v;
}

struct Case {
  int t, n, k;
};

// (8, 64, 4104) stages 66 KB of input: past the kernel's limit, so it takes the unfused ops.
const Case kCases[] = {{1, 1000, 1032}, {3, 4104, 1024}, {8, 7, 3072},
                       {2, 1024, 8},    {5, 129, 2056},  {8, 64, 4104}};

TEST(CudaFusedGemv, NormLinearMatchesReference) {
  KS_REQUIRE_GPU();
  Backend& be = gpu();
  std::mt19937 rng(7);
  for (const Case& c : kCases) {
    for (int variant = 0; variant < 2; ++variant) {
      const bool f32 = variant == 1;  // the LM head's form: fp32 logits, no bias
      SCOPED_TRACE(testing::Message() << "T " << c.t << " N " << c.n << " K " << c.k
                                      << (f32 ? " F32" : " BF16 + bias"));
      Bf16Data x = random_bf16(Shape{c.t, c.k}, rng, -2.0f, 2.0f);
      Bf16Data nw = random_bf16(Shape{c.k}, rng, 0.5f, 1.5f);
      Bf16Data w = random_bf16(Shape{c.n, c.k}, rng);
      Bf16Data bias = random_bf16(Shape{c.n}, rng);
      Tensor out = poisoned(f32 ? DType::kF32 : DType::kBF16, Shape{c.t, c.n});
      Tensor x_d = be.upload(x.host, DType::kBF16);
      be.norm_linear(x_d, be.upload(nw.host, DType::kBF16), 1e-6f, be.upload(w.host, DType::kBF16),
                     f32 ? Tensor() : be.upload(bias.host, DType::kBF16), out);
      const std::vector<double> want =
          product(normed_rows(x.values, nw, c.t, c.k, 1e-6), w, f32 ? nullptr : &bias, c.t, c.n, c.k);
      expect_close(fetch(out), want, "norm_linear");
      expect_close(fetch(x_d), x.values, "norm_linear leaves x", 0, 0, 0);
    }
  }
}

TEST(CudaFusedGemv, LinearAddMatchesReference) {
  KS_REQUIRE_GPU();
  Backend& be = gpu();
  std::mt19937 rng(8);
  for (const Case& c : kCases) {
    for (int with_bias = 0; with_bias < 2; ++with_bias) {
      SCOPED_TRACE(testing::Message() << "T " << c.t << " N " << c.n << " K " << c.k << " bias "
                                      << with_bias);
      Bf16Data x = random_bf16(Shape{c.t, c.k}, rng);
      Bf16Data w = random_bf16(Shape{c.n, c.k}, rng);
      Bf16Data bias = random_bf16(Shape{c.n}, rng);
      Bf16Data residual = random_bf16(Shape{c.t, c.n}, rng, -8.0f, 8.0f);
      Tensor r = be.upload(residual.host, DType::kBF16);
      be.linear_add(be.upload(x.host, DType::kBF16), be.upload(w.host, DType::kBF16),
                    with_bias ? be.upload(bias.host, DType::kBF16) : Tensor(), r);
      const std::vector<double> p =
          product(x.values, w, with_bias ? &bias : nullptr, c.t, c.n, c.k);
      expect_close(fetch(r), added(residual.values, p), "linear_add");
    }
  }
}

TEST(CudaFusedGemv, SiluMulLinearAddMatchesReference) {
  KS_REQUIRE_GPU();
  Backend& be = gpu();
  std::mt19937 rng(9);
  for (const Case& c : kCases) {
    SCOPED_TRACE(testing::Message() << "T " << c.t << " N " << c.n << " K " << c.k);
    Bf16Data gate_up = random_bf16(Shape{c.t, 2 * c.k}, rng, -3.0f, 3.0f);
    Bf16Data w = random_bf16(Shape{c.n, c.k}, rng);
    Bf16Data residual = random_bf16(Shape{c.t, c.n}, rng, -8.0f, 8.0f);
    Tensor r = be.upload(residual.host, DType::kBF16);
    be.silu_mul_linear_add(be.upload(gate_up.host, DType::kBF16), be.upload(w.host, DType::kBF16),
                           r);
    const std::vector<double> p =
        product(silu_rows(gate_up.values, c.t, c.k), w, nullptr, c.t, c.n, c.k);
    expect_close(fetch(r), added(residual.values, p), "silu_mul_linear_add");
  }
}

// A decoder layer's shapes: hidden H, attention width A (Hq D), intermediate I, qkv width Q.
struct TailCase {
  int t, h, a, i, q;
  bool biases, next;
};

// Qwen3-0.6B's shapes (gate_up takes two passes of the chain kernel's slots on a 132-SM GPU)
// and odd ones; with and without the next layer's product and the biases. The last case
// stages 66 KB of input for the down product: past the kernel's limit, so the ops it
// composes run instead.
const TailCase kTailCases[] = {{1, 1024, 2048, 3072, 4096, false, true},
                               {8, 1024, 2048, 3072, 4096, false, true},
                               {3, 1024, 2048, 3072, 4096, true, false},
                               {5, 520, 264, 1000, 776, true, true},
                               {2, 24, 40, 8, 56, false, true},
                               {8, 64, 64, 4104, 64, true, true}};

TEST(CudaFusedGemv, LayerTailMatchesReference) {
  KS_REQUIRE_GPU();
  Backend& be = gpu();
  std::mt19937 rng(10);
  const double eps = 1e-6;
  for (const TailCase& c : kTailCases) {
    SCOPED_TRACE(testing::Message() << "T " << c.t << " H " << c.h << " A " << c.a << " I "
                                    << c.i << " Q " << c.q << " biases " << c.biases
                                    << " next " << c.next);
    // Weights scaled so that every product is O(1), as in a model.
    const float ws = 1.0f / std::sqrt(float(c.h));
    Bf16Data attn = random_bf16(Shape{c.t, c.a}, rng);
    Bf16Data o_proj = random_bf16(Shape{c.h, c.a}, rng, -ws, ws);
    Bf16Data o_bias = random_bf16(Shape{c.h}, rng);
    Bf16Data post_norm = random_bf16(Shape{c.h}, rng, 0.5f, 1.5f);
    Bf16Data gate_up_w = random_bf16(Shape{2 * c.i, c.h}, rng, -2 * ws, 2 * ws);
    Bf16Data down = random_bf16(Shape{c.h, c.i}, rng, -ws, ws);
    Bf16Data next_norm = random_bf16(Shape{c.h}, rng, 0.5f, 1.5f);
    Bf16Data next_qkv = random_bf16(Shape{c.q, c.h}, rng, -ws, ws);
    Bf16Data qkv_bias = random_bf16(Shape{c.q}, rng);
    Bf16Data residual = random_bf16(Shape{c.t, c.h}, rng, -4.0f, 4.0f);

    LayerTail tail;
    tail.attn = be.upload(attn.host, DType::kBF16);
    tail.o_proj = be.upload(o_proj.host, DType::kBF16);
    if (c.biases) tail.o_bias = be.upload(o_bias.host, DType::kBF16);
    tail.post_norm = be.upload(post_norm.host, DType::kBF16);
    tail.gate_up_w = be.upload(gate_up_w.host, DType::kBF16);
    tail.down = be.upload(down.host, DType::kBF16);
    if (c.next) {
      tail.next_norm = be.upload(next_norm.host, DType::kBF16);
      tail.next_qkv = be.upload(next_qkv.host, DType::kBF16);
      if (c.biases) tail.next_qkv_bias = be.upload(qkv_bias.host, DType::kBF16);
    }
    tail.eps = static_cast<float>(eps);
    tail.residual = be.upload(residual.host, DType::kBF16);
    tail.gate_up = poisoned(DType::kBF16, Shape{c.t, 2 * c.i});
    tail.qkv = poisoned(DType::kBF16, Shape{c.t, c.q});
    be.layer_tail(tail);

    const std::vector<double> r1 = added(
        residual.values, product(attn.values, o_proj, c.biases ? &o_bias : nullptr, c.t, c.h, c.a));
    const std::vector<double> gu =
        rounded(product(normed_rows(r1, post_norm, c.t, c.h, eps), gate_up_w, nullptr, c.t,
                        2 * c.i, c.h));
    const std::vector<double> r2 =
        added(r1, product(silu_rows(gu, c.t, c.i), down, nullptr, c.t, c.h, c.i));
    expect_close(fetch(tail.gate_up), gu, "layer_tail gate_up");
    expect_close(fetch(tail.residual), r2, "layer_tail residual");
    if (c.next) {
      const std::vector<double> qkv =
          product(normed_rows(r2, next_norm, c.t, c.h, eps), next_qkv,
                  c.biases ? &qkv_bias : nullptr, c.t, c.q, c.h);
      expect_close(fetch(tail.qkv), qkv, "layer_tail qkv");
    } else {
      const std::vector<double> untouched = fetch(tail.qkv);
      for (double v : untouched) ASSERT_TRUE(std::isnan(v)) << "layer_tail wrote qkv";
    }
  }
}

// The chain kernel's grid barrier over many launches back to back (no host sync between
// them; 4 and 3 products alternating, so 3 and 2 barriers): a miscounted barrier would hang
// or let a product read its input early, which changes bits. Every launch starts from the
// same inputs in its own buffers, so every one must give launch 0's bits.
TEST(CudaFusedGemv, LayerTailRepeatsBitIdentically) {
  KS_REQUIRE_GPU();
  Backend& be = gpu();
  std::mt19937 rng(11);
  const int t = 4, h = 256, a = 256, i = 512, q = 384, launches = 60;
  auto up = [&](Shape s, float lo, float hi) {
    return be.upload(random_bf16(s, rng, lo, hi).host, DType::kBF16);
  };
  LayerTail tail;
  tail.attn = up(Shape{t, a}, -1, 1);
  tail.o_proj = up(Shape{h, a}, -0.06f, 0.06f);
  tail.post_norm = up(Shape{h}, 0.5f, 1.5f);
  tail.gate_up_w = up(Shape{2 * i, h}, -0.12f, 0.12f);
  tail.down = up(Shape{h, i}, -0.04f, 0.04f);
  tail.next_norm = up(Shape{h}, 0.5f, 1.5f);
  const Tensor next_qkv = up(Shape{q, h}, -0.06f, 0.06f);
  tail.eps = 1e-6f;
  const Bf16Data residual = random_bf16(Shape{t, h}, rng, -4.0f, 4.0f);
  std::vector<Tensor> residuals, qkvs;
  for (int n = 0; n < launches; ++n) {
    residuals.push_back(be.empty(DType::kBF16, Shape{t, h}));
    qkvs.push_back(be.empty(DType::kBF16, Shape{t, q}));
    be.copy_from_host(residual.host, residuals.back());
    tail.residual = residuals.back();
    tail.qkv = qkvs.back();
    tail.gate_up = be.empty(DType::kBF16, Shape{t, 2 * i});
    tail.next_qkv = n % 2 == 0 ? next_qkv : Tensor();
    be.layer_tail(tail);
  }
  const std::vector<double> first = fetch(residuals[0]), first_qkv = fetch(qkvs[0]);
  for (int n = 1; n < launches; ++n) {
    ASSERT_EQ(fetch(residuals[n]), first) << "launch " << n;
    if (n % 2 == 0) {
      ASSERT_EQ(fetch(qkvs[n]), first_qkv) << "launch " << n;
    }
  }
  // And launch 0 against the ops it stands for.
  LayerTail ops = tail;
  ops.residual = be.upload(residual.host, DType::kBF16);
  ops.qkv = be.empty(DType::kBF16, Shape{t, q});
  ops.next_qkv = next_qkv;
  be.Backend::layer_tail(ops);
  expect_close(first, fetch(ops.residual), "chain vs its ops");
  expect_close(first_qkv, fetch(ops.qkv), "chain vs its ops, qkv");
}

TEST(CudaFusedGemv, RejectsMismatchedShapes) {
  KS_REQUIRE_GPU();
  Backend& be = gpu();
  Tensor x = be.empty(DType::kBF16, Shape{2, 64});
  Tensor w = be.empty(DType::kBF16, Shape{16, 32});
  Tensor out = be.empty(DType::kBF16, Shape{2, 16});
  Tensor nw = be.empty(DType::kBF16, Shape{64});
  EXPECT_THROW(be.norm_linear(x, nw, 1e-6f, w, Tensor(), out), Error);
  EXPECT_THROW(be.linear_add(x, w, Tensor(), out), Error);
  Tensor gate_up = be.empty(DType::kBF16, Shape{2, 48});
  EXPECT_THROW(be.silu_mul_linear_add(gate_up, w, out), Error);
  LayerTail tail;
  tail.attn = x;
  tail.o_proj = w;  // [16, 32] against attn's 64 columns
  tail.post_norm = nw;
  tail.gate_up_w = w;
  tail.down = w;
  tail.residual = out;
  tail.gate_up = gate_up;
  EXPECT_THROW(be.layer_tail(tail), Error);
}

}  // namespace
}  // namespace kestrel
