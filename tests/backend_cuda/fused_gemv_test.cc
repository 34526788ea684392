// The fused small-step ops of the CUDA backend (norm_linear, linear_add, silu_mul_linear_add,
// silu_mul_linear; gemv_fused.h) against double-precision references written here that
// round to bf16 where the unfused ops round (rms_norm, silu_mul, the product, the residual
// add), over odd shapes, with and without bias, and past the kernel's shared-memory limit
// (the unfused fallback).
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
std::vector<double> normed_rows(const Bf16Data& x, const Bf16Data& nw, int t, int k, double eps) {
  std::vector<double> out(size_t(t) * k);
  for (int i = 0; i < t; ++i) {
    double ss = 0;
    for (int c = 0; c < k; ++c) ss += x.values[size_t(i) * k + c] * x.values[size_t(i) * k + c];
    const double inv = 1.0 / std::sqrt(ss / k + eps);
    for (int c = 0; c < k; ++c) {
      out[size_t(i) * k + c] = round_bf16(nw.values[c] * round_bf16(x.values[size_t(i) * k + c] * inv));
    }
  }
  return out;
}

std::vector<double> silu_rows(const Bf16Data& gate_up, int t, int k) {
  std::vector<double> out(size_t(t) * k);
  for (int i = 0; i < t; ++i) {
    for (int c = 0; c < k; ++c) {
      const double g = gate_up.values[size_t(i) * 2 * k + c];
      const double u = gate_up.values[size_t(i) * 2 * k + k + c];
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

std::vector<double> added(const Bf16Data& residual, const std::vector<double>& p) {
  std::vector<double> out(p.size());
  for (size_t i = 0; i < p.size(); ++i) out[i] = round_bf16(residual.values[i] + round_bf16(p[i]));
  return out;
}

struct Case {
  int t, n, k;
};

// (8, 64, 4104) stages 66 KB of input: past the kernel's limit, so it takes the unfused ops.
// The last three give the persistent CTAs several groups each, and (K 16384) each warp
// several batches per group, so the ring of w batches wraps within and across groups.
const Case kCases[] = {{1, 1000, 1032},  {3, 4104, 1024}, {8, 7, 3072},     {2, 1024, 8},
                       {5, 129, 2056},   {8, 64, 4104},   {1, 40000, 1032}, {2, 9000, 4096},
                       {1, 3000, 16384}};

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
          product(normed_rows(x, nw, c.t, c.k, 1e-6), w, f32 ? nullptr : &bias, c.t, c.n, c.k);
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
      expect_close(fetch(r), added(residual, p), "linear_add");
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
    const std::vector<double> p = product(silu_rows(gate_up, c.t, c.k), w, nullptr, c.t, c.n, c.k);
    expect_close(fetch(r), added(residual, p), "silu_mul_linear_add");
  }
}

// The partial down product of tensor parallelism: silu_mul then linear, nothing added.
TEST(CudaFusedGemv, SiluMulLinearMatchesReference) {
  KS_REQUIRE_GPU();
  Backend& be = gpu();
  std::mt19937 rng(10);
  for (const Case& c : kCases) {
    SCOPED_TRACE(testing::Message() << "T " << c.t << " N " << c.n << " K " << c.k);
    Bf16Data gate_up = random_bf16(Shape{c.t, 2 * c.k}, rng, -3.0f, 3.0f);
    Bf16Data w = random_bf16(Shape{c.n, c.k}, rng);
    Tensor out = poisoned(DType::kBF16, Shape{c.t, c.n});
    be.silu_mul_linear(be.upload(gate_up.host, DType::kBF16), be.upload(w.host, DType::kBF16),
                       out);
    const std::vector<double> p = product(silu_rows(gate_up, c.t, c.k), w, nullptr, c.t, c.n, c.k);
    expect_close(fetch(out), p, "silu_mul_linear");
  }
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
  EXPECT_THROW(be.silu_mul_linear(gate_up, w, out), Error);
}

}  // namespace
}  // namespace kestrel
