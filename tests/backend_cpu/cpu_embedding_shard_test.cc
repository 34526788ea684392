// embedding_shard of the CPU backend: the vocab-parallel lookup of one tensor-parallel rank,
// against a plain loop, and the sum over ranks against the whole table's embedding().
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "cpu_test_util.h"

namespace kestrel {
namespace {

using test::i32_tensor;
using test::random_f32;

TEST(CpuEmbeddingShard, CopiesOwnRowsAndZeroesTheRest) {
  std::mt19937 rng(1);
  CpuBackend be(2);
  for (int64_t H : {1, 64, 129}) {
    const int64_t Vp = 7, first = 14;
    Tensor table = random_f32({Vp, H}, rng);
    // Inside the shard at both ends, just outside it on both sides, and far away.
    std::vector<int32_t> ids{14, 20, 13, 21, 0, 17, 500, 14};
    Tensor out = be.empty(DType::kF32, {static_cast<int64_t>(ids.size()), H});
    std::memset(out.data(), 0xff, out.nbytes());  // NaNs: every row must be written
    be.embedding_shard(i32_tensor(ids), table, first, out);
    for (size_t t = 0; t < ids.size(); ++t) {
      const int64_t row = ids[t] - first;
      for (int64_t i = 0; i < H; ++i) {
        const float want = row >= 0 && row < Vp ? table.data_as<float>()[row * H + i] : 0.0f;
        ASSERT_EQ(out.data_as<float>()[t * H + i], want) << "id " << ids[t] << " col " << i;
      }
    }
  }
}

TEST(CpuEmbeddingShard, ShardsSumToTheWholeLookup) {
  // V = 10 over 4 ranks: Vp = 3, the last rank's table has two rows of padding.
  std::mt19937 rng(2);
  CpuBackend be(1);
  const int64_t V = 10, H = 5, N = 4, Vp = 3;
  Tensor whole = random_f32({V, H}, rng);
  const std::vector<int32_t> ids{0, 9, 3, 2, 8, 6, 5};
  const int64_t T = static_cast<int64_t>(ids.size());
  Tensor want = be.empty(DType::kF32, {T, H});
  be.embedding(i32_tensor(ids), whole, want);
  std::vector<float> sum(T * H, 0.0f);
  for (int64_t r = 0; r < N; ++r) {
    Tensor shard = Tensor::host(DType::kF32, {Vp, H});
    const int64_t rows = std::min(Vp, V - r * Vp);
    std::memcpy(shard.data(), whole.data_as<float>() + r * Vp * H, rows * H * sizeof(float));
    Tensor out = be.empty(DType::kF32, {T, H});
    be.embedding_shard(i32_tensor(ids), shard, r * Vp, out);
    for (int64_t i = 0; i < T * H; ++i) sum[i] += out.data_as<float>()[i];
  }
  for (int64_t i = 0; i < T * H; ++i) ASSERT_EQ(sum[i], want.data_as<float>()[i]) << i;
}

TEST(CpuEmbeddingShard, RejectsBadArguments) {
  std::mt19937 rng(3);
  CpuBackend be(1);
  Tensor table = random_f32({4, 8}, rng);
  Tensor out = be.empty(DType::kF32, {2, 8});
  // The CPU backend has no token feedback: a negative id is an error, not a pending token.
  EXPECT_THROW(be.embedding_shard(i32_tensor({-1, 0}), table, 4, out), Error);
  EXPECT_THROW(be.embedding_shard(i32_tensor({1, 2}), table, -1, out), Error);
  Tensor wrong = be.empty(DType::kF32, {2, 9});
  EXPECT_THROW(be.embedding_shard(i32_tensor({1, 2}), table, 0, wrong), Error);
  Tensor short_out = be.empty(DType::kF32, {3, 8});
  EXPECT_THROW(be.embedding_shard(i32_tensor({1, 2}), table, 0, short_out), Error);
}

}  // namespace
}  // namespace kestrel
