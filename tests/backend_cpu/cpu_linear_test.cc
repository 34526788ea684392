// linear (x w^T + bias through OpenBLAS) against a double-precision triple loop.
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "cpu_test_util.h"

namespace kestrel {
namespace {

using test::expect_close;
using test::random_f32;

TEST(CpuLinear, MatchesReferenceWithAndWithoutBias) {
  std::mt19937 rng(21);
  CpuBackend be(2);
  for (int64_t T : {1, 7, 33}) {
    for (int64_t K : {5, 64, 129}) {
      for (int64_t N : {3, 100}) {
        for (bool with_bias : {false, true}) {
          Tensor x = random_f32({T, K}, rng);
          Tensor w = random_f32({N, K}, rng);
          Tensor bias = with_bias ? random_f32({N}, rng) : Tensor();
          Tensor out = be.empty(DType::kF32, {T, N});
          be.linear(x, w, bias, out);
          std::vector<double> want(T * N);
          for (int64_t t = 0; t < T; ++t) {
            for (int64_t n = 0; n < N; ++n) {
              double acc = with_bias ? bias.data_as<float>()[n] : 0.0;
              for (int64_t k = 0; k < K; ++k) {
                acc += double(x.data_as<float>()[t * K + k]) * w.data_as<float>()[n * K + k];
              }
              want[t * N + n] = acc;
            }
          }
          expect_close(out.data_as<float>(), want, 1e-5, "linear");
        }
      }
    }
  }
}

TEST(CpuLinear, RejectsMismatchedShapes) {
  std::mt19937 rng(22);
  CpuBackend be(1);
  Tensor x = random_f32({4, 8}, rng);
  Tensor w = random_f32({6, 9}, rng);
  Tensor out = be.empty(DType::kF32, {4, 6});
  EXPECT_THROW(be.linear(x, w, Tensor(), out), Error);
  Tensor w_ok = random_f32({6, 8}, rng);
  Tensor bad_bias = random_f32({5}, rng);
  EXPECT_THROW(be.linear(x, w_ok, bad_bias, out), Error);
  Tensor bad_out = be.empty(DType::kF32, {4, 7});
  EXPECT_THROW(be.linear(x, w_ok, Tensor(), bad_out), Error);
}

}  // namespace
}  // namespace kestrel
