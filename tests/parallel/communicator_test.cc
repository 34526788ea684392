// ProcessGroup and GlooCommunicator through the real multi-process path: the test is rank 0,
// LocalWorkers starts ranks 1..N-1 as copies of this binary, and every rank checks its own
// results (a worker's mismatch becomes its exit status).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "parallel/gloo_communicator.h"
#include "parallel/local_workers.h"
#include "parallel/process_group.h"
#include "worker_registry.h"

namespace kestrel {
namespace {

using std::chrono::milliseconds;
using testing::HasSubstr;

std::unique_ptr<ProcessGroup> join(const RankInfo& self) {
  return ProcessGroup::connect(self, milliseconds(10000), milliseconds(20000));
}

// The first mismatch, or empty. Values depend on the rank and the index, so a block put at
// the wrong rank's place or a missing contribution shows.
std::string check_group(ProcessGroup& g) {
  const int n = g.world_size(), me = g.rank();

  std::vector<uint8_t> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = me == 0 ? (i * 7 + 3) & 0xff : 0;
  g.broadcast(bytes.data(), bytes.size(), 0);
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != ((i * 7 + 3) & 0xff)) return fmt::format("broadcast byte {}", i);
  }
  // From the last rank, 64-bit values.
  std::vector<int64_t> big(5, -1);
  if (me == n - 1) big = {int64_t{1} << 40, -7, 3, 0, 99};
  g.broadcast(big.data(), big.size() * sizeof(int64_t), n - 1);
  if (big != std::vector<int64_t>{int64_t{1} << 40, -7, 3, 0, 99}) return "broadcast from last";

  std::vector<float> sum(1031);
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = 0.5f * (me + 1) + static_cast<float>(i);
  g.all_reduce_sum(sum.data(), sum.size());
  for (size_t i = 0; i < sum.size(); ++i) {
    const float want = 0.25f * n * (n + 1) + static_cast<float>(n * i);
    if (sum[i] != want) return fmt::format("all_reduce_sum [{}] = {}, want {}", i, sum[i], want);
  }

  std::vector<uint8_t> mine(13), all(13 * n, 0);
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<uint8_t>(me * 16 + i);
  g.all_gather(mine.data(), mine.size(), all.data());
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < mine.size(); ++i) {
      if (all[r * 13 + i] != r * 16 + i) return fmt::format("all_gather rank {} byte {}", r, i);
    }
  }

  // One byte each: gloo's ring splits every block in two chunks, here of 0 and 1 bytes.
  uint8_t one = static_cast<uint8_t>(200 + me);
  std::vector<uint8_t> ones(n);
  g.all_gather(&one, 1, ones.data());
  for (int r = 0; r < n; ++r) {
    if (ones[r] != 200 + r) return fmt::format("all_gather of one byte, rank {}", r);
  }

  const int64_t lowest = -5'000'000'000'000;  // beyond 32 bits
  const int64_t got = g.all_reduce_min(me == n - 1 ? lowest : 100 - me * 3);
  if (got != lowest) return fmt::format("all_reduce_min = {}", got);
  if (g.all_reduce_min(100 - me * 3) != 100 - (n - 1) * 3) return "all_reduce_min of positives";

  g.barrier();
  return "";
}

std::string check_gather_columns(Communicator& comm, int64_t rows, int64_t cols, int64_t width) {
  const int me = comm.rank();
  Tensor in = Tensor::host(DType::kF32, {rows, cols});
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) in.data_as<float>()[i * cols + j] = me * 100 + i * 10 + j;
  }
  Tensor out = Tensor::host(DType::kF32, {rows, width});
  comm.all_gather_columns(in, out);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t c = 0; c < width; ++c) {
      const float want = (c / cols) * 100 + i * 10 + c % cols;
      const float have = out.data_as<float>()[i * width + c];
      if (have != want) {
        return fmt::format("all_gather_columns W={} out[{}, {}] = {}, want {}", width, i, c, have,
                           want);
      }
    }
  }
  return "";
}

std::string check_communicator(ProcessGroup& g) {
  auto comm = make_gloo_communicator(g);
  const int n = comm->world_size(), me = comm->rank();
  if (comm->name() != "gloo" || me != g.rank()) return "identity";

  Tensor t = Tensor::host(DType::kF32, {3, 5});
  for (int i = 0; i < 15; ++i) t.data_as<float>()[i] = me * 10.0f + i;
  comm->all_reduce_sum(t);
  for (int i = 0; i < 15; ++i) {
    const float want = 10.0f * n * (n - 1) / 2 + static_cast<float>(n * i);
    if (t.data_as<float>()[i] != want) return fmt::format("Communicator all_reduce_sum [{}]", i);
  }

  // W = N*C, then W not a multiple of N (the last rank's padding dropped), then the least W.
  for (int64_t width : {n * 3, n * 3 - 2, (n - 1) * 3 + 1}) {
    if (std::string e = check_gather_columns(*comm, 4, 3, width); !e.empty()) return e;
  }
  if (comm->all_reduce_min_host(7 + me) != 7) return "all_reduce_min_host";
  int64_t word = me == 0 ? 4242 : 0;
  comm->broadcast_host(&word, sizeof(word), 0);
  if (word != 4242) return "broadcast_host";
  // A tensor from the last rank (as rank 0's sampled tokens go to every rank, any root works).
  Tensor ids = Tensor::host(DType::kI32, {5});
  for (int i = 0; i < 5; ++i) ids.data_as<int32_t>()[i] = me == n - 1 ? 1000 + i : -1;
  comm->broadcast(ids, n - 1);
  for (int i = 0; i < 5; ++i) {
    if (ids.data_as<int32_t>()[i] != 1000 + i) return fmt::format("broadcast [{}]", i);
  }
  comm->barrier();
  return "";
}

int report(const RankInfo& self, const std::string& mismatch) {
  if (mismatch.empty()) return 0;
  fmt::print(stderr, "tensor-parallel rank {}: {}\n", self.rank, mismatch);
  return 1;
}

KS_TP_WORKER(collectives) {
  auto group = join(self);
  if (int rc = report(self, check_group(*group)); rc != 0) return rc;
  return report(self, check_communicator(*group));
}

class Collectives : public testing::TestWithParam<int> {};

TEST_P(Collectives, EveryRankGetsTheRightValues) {
  const int n = GetParam();
  auto workers = test::spawn_workers("collectives", n);
  {
    auto group = join(workers->rank0());
    ASSERT_EQ(group->rank(), 0);
    ASSERT_EQ(group->world_size(), n);
    EXPECT_EQ(check_group(*group), "");
    EXPECT_EQ(check_communicator(*group), "");
  }
  ASSERT_TRUE(workers->wait_exit(10000)) << workers->dead_worker();
  // Abnormal ends are named first, so this means every worker exited with 0.
  EXPECT_THAT(workers->dead_worker(), HasSubstr("exited with status 0"));
}

INSTANTIATE_TEST_SUITE_P(Ranks, Collectives, testing::Values(2, 4));

}  // namespace
}  // namespace kestrel
