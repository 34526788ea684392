// embedding, silu_mul, linear_silu_mul, gather_rows and the memory functions of the CPU backend, against
// plain loops in double precision written here.
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "cpu_test_util.h"

namespace kestrel {
namespace {

using test::expect_close;
using test::i32_tensor;
using test::random_f32;

TEST(CpuElementwise, EmbeddingCopiesTableRows) {
  std::mt19937 rng(1);
  CpuBackend be(2);
  for (int64_t H : {1, 64, 129}) {
    const int64_t V = 37;
    Tensor table = random_f32({V, H}, rng);
    std::vector<int32_t> ids{0, 36, 5, 5, 17, 1, 30};
    Tensor out = be.empty(DType::kF32, {static_cast<int64_t>(ids.size()), H});
    be.embedding(i32_tensor(ids), table, out);
    for (size_t t = 0; t < ids.size(); ++t) {
      for (int64_t i = 0; i < H; ++i) {
        ASSERT_EQ(out.data_as<float>()[t * H + i], table.data_as<float>()[ids[t] * H + i]);
      }
    }
  }
}

TEST(CpuElementwise, EmbeddingRejectsIdOutsideVocab) {
  std::mt19937 rng(2);
  CpuBackend be(1);
  Tensor table = random_f32({10, 8}, rng);
  Tensor out = be.empty(DType::kF32, {2, 8});
  EXPECT_THROW(be.embedding(i32_tensor({3, 10}), table, out), Error);
  EXPECT_THROW(be.embedding(i32_tensor({-1, 0}), table, out), Error);
  Tensor wrong = be.empty(DType::kF32, {2, 9});
  EXPECT_THROW(be.embedding(i32_tensor({1, 2}), table, wrong), Error);
}

TEST(CpuElementwise, SiluMulMatchesReference) {
  std::mt19937 rng(3);
  CpuBackend be(2);
  for (int64_t T : {1, 7, 33}) {
    for (int64_t I : {1, 5, 96}) {
      Tensor x = random_f32({T, 2 * I}, rng, -6.0f, 6.0f);
      Tensor out = be.empty(DType::kF32, {T, I});
      be.silu_mul(x, out);
      std::vector<double> want(T * I);
      const float* p = x.data_as<float>();
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t i = 0; i < I; ++i) {
          const double g = p[t * 2 * I + i], u = p[t * 2 * I + I + i];
          want[t * I + i] = g / (1.0 + std::exp(-g)) * u;
        }
      }
      expect_close(out.data_as<float>(), want, 1e-6, "silu_mul");
    }
  }
  Tensor x = random_f32({3, 10}, rng);
  Tensor bad = be.empty(DType::kF32, {3, 4});
  EXPECT_THROW(be.silu_mul(x, bad), Error);
}

// Backend's default linear_silu_mul (the product into gate_up, then silu_mul), which the CPU
// backend keeps: the MLP's activation straight from x and [gate; up].
TEST(CpuElementwise, LinearSiluMulMatchesReference) {
  std::mt19937 rng(5);
  CpuBackend be(2);
  const int64_t T = 9, K = 24, I = 13;
  Tensor x = random_f32({T, K}, rng);
  Tensor w = random_f32({2 * I, K}, rng);
  Tensor gate_up = be.empty(DType::kF32, {T, 2 * I});
  Tensor out = be.empty(DType::kF32, {T, I});
  be.linear_silu_mul(x, w, gate_up, out);
  std::vector<double> want(T * I);
  const float* xp = x.data_as<float>();
  const float* wp = w.data_as<float>();
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < I; ++i) {
      double g = 0, u = 0;
      for (int64_t k = 0; k < K; ++k) {
        g += double(xp[t * K + k]) * wp[i * K + k];
        u += double(xp[t * K + k]) * wp[(I + i) * K + k];
      }
      want[t * I + i] = g / (1.0 + std::exp(-g)) * u;
    }
  }
  expect_close(out.data_as<float>(), want, 1e-5, "linear_silu_mul");
}

TEST(CpuElementwise, GatherRowsPicksRequestedRows) {
  std::mt19937 rng(4);
  CpuBackend be(2);
  Tensor x = random_f32({33, 17}, rng);
  std::vector<int32_t> rows{32, 0, 7, 7};
  Tensor out = be.empty(DType::kF32, {4, 17});
  be.gather_rows(x, i32_tensor(rows), out);
  for (size_t s = 0; s < rows.size(); ++s) {
    for (int i = 0; i < 17; ++i) {
      ASSERT_EQ(out.data_as<float>()[s * 17 + i], x.data_as<float>()[rows[s] * 17 + i]);
    }
  }
  EXPECT_THROW(be.gather_rows(x, i32_tensor({0, 1, 2, 33}), out), Error);
}

TEST(CpuMemory, UploadConvertsBf16AndF16ToF32) {
  CpuBackend be(2);
  // Bit patterns of 1.0, -2.5 and 0.15625 in bf16 and in f16.
  Tensor bf = Tensor::host(DType::kBF16, {3});
  const uint16_t bf_bits[] = {0x3f80, 0xc020, 0x3e20};
  std::copy(bf_bits, bf_bits + 3, bf.data_as<uint16_t>());
  Tensor hf = Tensor::host(DType::kF16, {3});
  const uint16_t hf_bits[] = {0x3c00, 0xc100, 0x3100};
  std::copy(hf_bits, hf_bits + 3, hf.data_as<uint16_t>());
  for (const Tensor& src : {bf, hf}) {
    Tensor t = be.upload(src, DType::kF32);
    ASSERT_EQ(t.dtype(), DType::kF32);
    EXPECT_EQ(t.data_as<float>()[0], 1.0f);
    EXPECT_EQ(t.data_as<float>()[1], -2.5f);
    EXPECT_EQ(t.data_as<float>()[2], 0.15625f);
  }
  // Larger than one conversion chunk, so several threads take part.
  std::mt19937 rng(5);
  Tensor big = Tensor::host(DType::kBF16, {300001});
  std::vector<float> want(300001);
  for (int64_t i = 0; i < big.numel(); ++i) {
    const uint16_t bits = static_cast<uint16_t>(rng() & 0x7f7f);  // finite values
    big.data_as<uint16_t>()[i] = bits;
    uint32_t wide = static_cast<uint32_t>(bits) << 16;
    std::memcpy(&want[i], &wide, 4);
  }
  Tensor up = be.upload(big, DType::kF32);
  for (int64_t i = 0; i < big.numel(); ++i) ASSERT_EQ(up.data_as<float>()[i], want[i]) << i;
  EXPECT_THROW(be.upload(test::i32_tensor({1, 2}), DType::kF32), Error);
}

TEST(CpuMemory, ToHostCopies) {
  CpuBackend be(1);
  std::mt19937 rng(6);
  Tensor a = random_f32({4, 5}, rng);
  Tensor h = be.to_host(a);
  ASSERT_EQ(h.shape(), a.shape());
  EXPECT_NE(h.data(), a.data());
  EXPECT_EQ(std::memcmp(h.data(), a.data(), a.nbytes()), 0);
}

TEST(CpuMemory, KvCacheHasPerLayerPagesInOneAllocation) {
  CpuBackend be(1);
  KvCacheSpec spec{3, 5, 16, 2, 32, DType::kF32};
  auto kv = be.allocate_kv_cache(spec);
  ASSERT_EQ(kv.size(), 3u);
  const Shape want{5, 16, 2, 32};
  for (const LayerKvCache& l : kv) {
    EXPECT_EQ(l.k.shape(), want);
    EXPECT_EQ(l.v.shape(), want);
  }
  // Contiguous: layer l's V follows its K, layer l+1's K follows layer l's V.
  EXPECT_EQ(static_cast<char*>(kv[0].v.data()) - static_cast<char*>(kv[0].k.data()),
            static_cast<ptrdiff_t>(kv[0].k.nbytes()));
  EXPECT_EQ(
      static_cast<char*>(kv[2].v.data()) + kv[2].v.nbytes() - static_cast<char*>(kv[0].k.data()),
      static_cast<ptrdiff_t>(spec.bytes_per_block() * spec.num_blocks));
  spec.dtype = DType::kBF16;
  EXPECT_THROW(be.allocate_kv_cache(spec), Error);
}

}  // namespace
}  // namespace kestrel
