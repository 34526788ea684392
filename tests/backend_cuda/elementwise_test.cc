// embedding, embedding_shard, gather_rows and silu_mul against plain references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>

#include "backend/cuda/cuda_backend_impl.h"  // token_feedback(): the buffer to fill by hand
#include "core/error.h"
#include "cuda_test_util.h"

namespace kestrel {
namespace {

using namespace cuda_test;

TEST(CudaEmbedding, CopiesTableRows) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(21);
  const int vocab = 1000;
  // Row sizes of 128, 2048, 200 and 202 bytes: 16-, 16-, 8- and 2-byte vector paths.
  for (int h : {64, 1024, 100, 101}) {
    Bf16Data table = random_bf16(Shape{vocab, h}, rng);
    Tensor table_d = gpu().upload(table.host, DType::kBF16);
    for (int t : token_counts()) {
      SCOPED_TRACE(testing::Message() << "tokens " << t << " hidden " << h);
      std::vector<int32_t> ids(t);
      std::uniform_int_distribution<int> pick(0, vocab - 1);
      for (int& id : ids) id = pick(rng);
      ids[0] = vocab - 1;  // the last row too
      Tensor out = poisoned(DType::kBF16, Shape{t, h});
      gpu().embedding(gpu().upload(i32_host(ids), DType::kI32), table_d, out);
      std::vector<double> got = fetch(out);
      for (int i = 0; i < t; ++i) {
        for (int j = 0; j < h; ++j) {
          ASSERT_EQ(got[size_t(i) * h + j], table.values[size_t(ids[i]) * h + j])
              << "token " << i << " dim " << j;
        }
      }
    }
  }
}

TEST(CudaEmbedding, OutOfRangeIdsGiveZeros) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(22);
  Bf16Data table = random_bf16(Shape{10, 64}, rng, 1.0f, 2.0f);  // no zeros in the table
  Tensor out = poisoned(DType::kBF16, Shape{3, 64});
  gpu().embedding(gpu().upload(i32_host({-1, 10, 3}), DType::kI32),
                  gpu().upload(table.host, DType::kBF16), out);
  std::vector<double> got = fetch(out);
  for (int j = 0; j < 64; ++j) {
    EXPECT_EQ(got[j], 0.0);
    EXPECT_EQ(got[64 + j], 0.0);
    EXPECT_EQ(got[128 + j], table.values[3 * 64 + j]);
  }
}

// The reference of embedding_shard: table[id - first] inside the shard, zeros outside.
std::vector<double> shard_reference(const std::vector<int32_t>& ids, const Bf16Data& table,
                                    int64_t first, int h) {
  const int64_t rows = table.host.dim(0);
  std::vector<double> want(ids.size() * h, 0.0);
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t r = ids[i] - first;
    if (r < 0 || r >= rows) continue;
    for (int j = 0; j < h; ++j) want[i * h + j] = table.values[size_t(r) * h + j];
  }
  return want;
}

TEST(CudaEmbeddingShard, CopiesOwnRowsAndZeroesTheRest) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(24);
  const int vp = 250, vocab = 1000;
  for (int h : {64, 101}) {
    Bf16Data table = random_bf16(Shape{vp, h}, rng, 1.0f, 2.0f);  // no zeros in the table
    Tensor table_d = gpu().upload(table.host, DType::kBF16);
    for (int64_t first : {int64_t{0}, int64_t{250}, int64_t{750}}) {
      for (int t : token_counts()) {
        SCOPED_TRACE(testing::Message() << "tokens " << t << " hidden " << h << " first " << first);
        std::vector<int32_t> ids(t);
        std::uniform_int_distribution<int> pick(0, vocab - 1);
        for (int32_t& id : ids) id = pick(rng);
        ids[0] = static_cast<int32_t>(first);  // the shard's ends and just past them
        if (t > 1) ids[1] = static_cast<int32_t>(first + vp - 1);
        if (t > 2) ids[2] = static_cast<int32_t>(first + vp);
        if (t > 3 && first > 0) ids[3] = static_cast<int32_t>(first - 1);
        Tensor out = poisoned(DType::kBF16, Shape{t, h});
        gpu().embedding_shard(gpu().upload(i32_host(ids), DType::kI32), table_d, first, out);
        const std::vector<double> got = fetch(out);
        const std::vector<double> want = shard_reference(ids, table, first, h);
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_EQ(got[i], want[i])
              << "token " << i / h << " (id " << ids[i / h] << ") dim " << i % h;
        }
      }
    }
  }
}

TEST(CudaEmbeddingShard, ResolvesPendingTokensBeforeTheShift) {
  KS_REQUIRE_GPU();
  // A backend of its own: token feedback changes what a negative id means for later calls.
  std::unique_ptr<Backend> be = make_cuda_backend(0, CudaKvLayout::kTokenMajor);
  ASSERT_TRUE(be->enable_token_feedback(4));
  Tensor feedback = static_cast<CudaBackend&>(*be).token_feedback();
  // What the last sampling would have written for rows 0..3 (global token ids).
  be->copy_from_host(i32_host({7, 25, 3, 29}), feedback);
  std::mt19937 rng(25);
  const int h = 64;
  const int64_t first = 20;
  Bf16Data table = random_bf16(Shape{10, h}, rng, 1.0f, 2.0f);
  // -1 -> 7 (another rank's), -2 -> 25 (row 5), 22 (row 2), -4 -> 29 (row 9), 30 (outside).
  const std::vector<int32_t> ids{-1, -2, 22, -4, 30};
  Tensor out = poisoned(DType::kBF16, Shape{5, h}, *be);
  be->embedding_shard(be->upload(i32_host(ids), DType::kI32), be->upload(table.host, DType::kBF16),
                      first, out);
  const std::vector<double> got = fetch(out, *be);
  const std::vector<double> want = shard_reference({7, 25, 22, 29, 30}, table, first, h);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "element " << i;
}

TEST(CudaEmbeddingShard, RejectsBadArguments) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(26);
  Tensor table = gpu().upload(random_bf16(Shape{4, 8}, rng).host, DType::kBF16);
  Tensor ids = gpu().upload(i32_host({1, 2}), DType::kI32);
  Tensor out = gpu().empty(DType::kBF16, Shape{2, 8});
  EXPECT_THROW(gpu().embedding_shard(ids, table, -1, out), Error);
  Tensor wrong = gpu().empty(DType::kBF16, Shape{2, 9});
  EXPECT_THROW(gpu().embedding_shard(ids, table, 0, wrong), Error);
}

TEST(CudaGatherRows, PicksRowsOfF32AndBf16) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(23);
  for (int t : token_counts()) {
    for (int width : {1000, 151, 8}) {
      SCOPED_TRACE(testing::Message() << "rows " << t << " width " << width);
      std::vector<int32_t> rows;
      for (int i = t - 1; i >= 0; i -= 3) rows.push_back(i);  // reversed, every third row
      // F32 (logits): values i * width + j are exact in float.
      Tensor x = Tensor::host(DType::kF32, Shape{t, width});
      for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = float(i) + 0.5f;
      const int s = static_cast<int>(rows.size());
      Tensor out = poisoned(DType::kF32, Shape{s, width});
      Tensor rows_d = gpu().upload(i32_host(rows), DType::kI32);
      gpu().gather_rows(gpu().upload(x, DType::kF32), rows_d, out);
      std::vector<double> got = fetch(out);
      for (int i = 0; i < s; ++i)
        for (int j = 0; j < width; ++j)
          ASSERT_EQ(got[size_t(i) * width + j], double(rows[i]) * width + j + 0.5);

      Bf16Data xb = random_bf16(Shape{t, width}, rng);
      Tensor outb = poisoned(DType::kBF16, Shape{s, width});
      gpu().gather_rows(gpu().upload(xb.host, DType::kBF16), rows_d, outb);
      got = fetch(outb);
      for (int i = 0; i < s; ++i)
        for (int j = 0; j < width; ++j)
          ASSERT_EQ(got[size_t(i) * width + j], xb.values[size_t(rows[i]) * width + j]);
    }
  }
}

TEST(CudaSiluMul, MatchesReference) {
  KS_REQUIRE_GPU();
  std::mt19937 rng(24);
  // 3072 (Qwen3-0.6B), 100 (8-byte vectors), 33 (scalar).
  for (int inter : {3072, 100, 33}) {
    for (int t : token_counts()) {
      SCOPED_TRACE(testing::Message() << "tokens " << t << " inter " << inter);
      Bf16Data x = random_bf16(Shape{t, 2 * inter}, rng, -6.0f, 6.0f);
      Tensor out = poisoned(DType::kBF16, Shape{t, inter});
      gpu().silu_mul(gpu().upload(x.host, DType::kBF16), out);
      std::vector<double> ref(size_t(t) * inter);
      for (int i = 0; i < t; ++i) {
        for (int j = 0; j < inter; ++j) {
          const double g = x.values[size_t(i) * 2 * inter + j];
          const double u = x.values[size_t(i) * 2 * inter + inter + j];
          ref[size_t(i) * inter + j] = g / (1.0 + std::exp(-g)) * u;
        }
      }
      expect_close(fetch(out), ref, "silu_mul");
    }
  }
}

}  // namespace
}  // namespace kestrel
