// ThreadCommunicator (parallel/thread_communicator.h), the host side of the ranks-as-threads
// harness of the NCCL tests and allreduce_bench: broadcasts from every root, the minimum
// over ranks, barriers in a row, and a failing rank that must not leave the others waiting.
#include "parallel/thread_communicator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace kestrel {
namespace {

using testing::HasSubstr;

// Runs body(comm) on `ranks` threads; each rank's error message, "" for none. A rank that
// throws aborts the group, as the NCCL harness does.
std::vector<std::string> on_threads(int ranks, const std::function<void(ThreadCommunicator&)>& body) {
  ThreadGroup group(ranks);
  std::vector<std::string> errors(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        ThreadCommunicator comm(group, r);
        body(comm);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        group.abort_all();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

TEST(ThreadCommunicator, BroadcastsMinimaAndBarriers) {
  constexpr int kRanks = 4;
  std::vector<std::vector<int64_t>> got(kRanks);
  const auto errors = on_threads(kRanks, [&](ThreadCommunicator& comm) {
    const int me = comm.rank();
    EXPECT_EQ(comm.world_size(), kRanks);
    for (int root = 0; root < kRanks; ++root) {
      // Three values that name the root, so a broadcast from the wrong rank shows.
      int64_t v[3] = {me == root ? 100 + root : -1, me == root ? 7 * root : -1, me};
      comm.broadcast_host(v, 2 * sizeof(int64_t), root);
      got[me].push_back(v[0]);
      got[me].push_back(v[1]);
      got[me].push_back(v[2]);  // beyond the bytes sent: unchanged
      comm.barrier();
    }
    // Rank-dependent values whose minimum is rank 2's, then one where it is rank 0's.
    got[me].push_back(comm.all_reduce_min_host(me == 2 ? -5 : 10 + me));
    got[me].push_back(comm.all_reduce_min_host(1000 + me));
  });
  for (int r = 0; r < kRanks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_EQ(errors[r], "");
    std::vector<int64_t> want;
    for (int root = 0; root < kRanks; ++root) {
      want.push_back(100 + root);
      want.push_back(7 * root);
      want.push_back(r);
    }
    want.push_back(-5);
    want.push_back(1000);
    EXPECT_EQ(got[r], want);
  }
}

TEST(ThreadCommunicator, AFailingRankFailsTheOthersAtOnce) {
  constexpr int kRanks = 3;
  const auto start = std::chrono::steady_clock::now();
  const auto errors = on_threads(kRanks, [&](ThreadCommunicator& comm) {
    comm.barrier();
    if (comm.rank() == 1) throw Error("rank 1 broke");
    comm.barrier();  // ranks 0 and 2 wait here for rank 1, which never comes
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(errors[1], "rank 1 broke");
  EXPECT_THAT(errors[0], HasSubstr("another rank failed"));
  EXPECT_THAT(errors[2], HasSubstr("another rank failed"));
  EXPECT_LT(seconds, 30.0) << "the others waited for the 60 s timeout";
}

}  // namespace
}  // namespace kestrel
