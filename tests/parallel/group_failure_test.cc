// How a tensor-parallel group fails: a rank that never joins, a rank that dies mid-run, a
// live rank that stops taking part, abort(); and the checks done before any network.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "parallel/gloo_communicator.h"
#include "parallel/local_workers.h"
#include "parallel/process_group.h"
#include "worker_registry.h"

namespace kestrel {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using testing::HasSubstr;
using testing::Not;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A fresh rendezvous directory for a group no LocalWorkers made.
struct TempDir {
  std::string path;
  TempDir() {
    std::string pattern = ::testing::TempDir() + "kestrel-tp-test-XXXXXX";
    path = mkdtemp(pattern.data()) ? pattern : "";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// Reduces until the group fails or `max_ms` pass; `die_at` >= 0: _exit(3) at that
// iteration. Returns 4 when the failure was reported as the contract says, else 5.
int reduce_until_failure(const RankInfo& self, int die_at, int max_ms) {
  auto group = ProcessGroup::connect(self, milliseconds(10000), milliseconds(20000));
  int32_t pid = getpid();
  std::vector<int32_t> pids(self.world_size);
  group->all_gather(&pid, sizeof(pid), pids.data());
  std::vector<float> x(4096, 1.0f);
  const auto start = Clock::now();
  for (int i = 0; seconds_since(start) * 1000 < max_ms; ++i) {
    if (i == die_at) _exit(3);
    try {
      group->all_reduce_sum(x.data(), x.size());
      std::fill(x.begin(), x.end(), 1.0f);
    } catch (const Error& e) {
      const std::string first = e.what();
      fmt::print(stderr, "(expected) {}\n", first);
      try {
        group->barrier();
      } catch (const Error& again) {
        const bool same = again.what() == first;
        const bool named = first.find(fmt::format("tensor-parallel rank {}", self.rank)) == 0;
        return same && named ? 4 : 5;
      }
      return 5;
    }
  }
  return 6;  // never failed
}

KS_TP_WORKER(reduce_loop) { return reduce_until_failure(self, -1, 20000); }
KS_TP_WORKER(reduce_then_die) {
  return reduce_until_failure(self, self.rank == 2 ? 50 : -1, 20000);
}

// Rank 0's side: reduces until the group fails (after killing rank `kill_rank` at
// iteration 50 when >= 0). Returns the error; fails the test if it took 10 s or more.
std::string rank0_until_failure(ProcessGroup& group, int kill_rank) {
  int32_t pid = getpid();
  std::vector<int32_t> pids(group.world_size());
  group.all_gather(&pid, sizeof(pid), pids.data());
  std::vector<float> x(4096, 1.0f);
  const auto start = Clock::now();
  for (int i = 0; i < 1'000'000; ++i) {
    if (i == 50 && kill_rank >= 0) kill(pids[kill_rank], SIGKILL);
    try {
      group.all_reduce_sum(x.data(), x.size());
      std::fill(x.begin(), x.end(), 1.0f);
    } catch (const Error& e) {
      EXPECT_LT(seconds_since(start), 10.0);
      fmt::print(stderr, "(expected) {}\n", e.what());
      return e.what();
    }
  }
  ADD_FAILURE() << "no collective failed after a rank died";
  return "";
}

// Polls: a killed process is reaped a moment after its sockets close.
std::string wait_dead_worker(LocalWorkers& workers) {
  const auto start = Clock::now();
  std::string dead;
  while ((dead = workers.dead_worker()).empty() && seconds_since(start) < 5) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  return dead;
}

TEST(GroupFailure, KilledRankFailsTheNextCollective) {
  auto workers = test::spawn_workers("reduce_loop", 2);
  auto group = ProcessGroup::connect(workers->rank0(), milliseconds(10000), milliseconds(20000));
  const std::string error = rank0_until_failure(*group, 1);
  EXPECT_THAT(error, HasSubstr("tensor-parallel rank 0"));
  EXPECT_THAT(error, HasSubstr("all_reduce_sum"));
  EXPECT_THAT(wait_dead_worker(*workers), HasSubstr("tensor-parallel rank 1 (pid "));
  EXPECT_THAT(workers->dead_worker(), HasSubstr("was killed by signal 9 (Killed)"));
  // Broken for good: the same error at once, without the network.
  const auto start = Clock::now();
  try {
    int64_t word = 0;
    group->broadcast(&word, sizeof(word), 0);
    ADD_FAILURE() << "a broken group ran a broadcast";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), error);
  }
  EXPECT_LT(seconds_since(start), 0.5);
}

TEST(GroupFailure, RankThatExitsFailsEveryOtherRank) {
  auto workers = test::spawn_workers("reduce_then_die", 3);
  {
    auto group = ProcessGroup::connect(workers->rank0(), milliseconds(10000), milliseconds(20000));
    EXPECT_THAT(rank0_until_failure(*group, -1), HasSubstr("tensor-parallel rank 0"));
  }
  // The survivor (rank 1) notices by itself, within seconds, and exits with 4 (see above).
  ASSERT_TRUE(workers->wait_exit(5000)) << "a surviving worker kept running";
  EXPECT_THAT(workers->worker_end(2), HasSubstr("tensor-parallel rank 2"));
  EXPECT_THAT(workers->worker_end(2), HasSubstr("exited with status 3"));
  EXPECT_THAT(workers->worker_end(1), HasSubstr("exited with status 4"));
  EXPECT_THAT(workers->dead_worker(), Not(HasSubstr("status 0")));
}

KS_TP_WORKER(stall) {
  auto group = ProcessGroup::connect(self, milliseconds(10000), milliseconds(20000));
  std::this_thread::sleep_for(milliseconds(3000));  // alive, but not taking part
  try {
    group->barrier();
  } catch (const Error&) {
    return 4;  // rank 0 gave up and closed its connections
  }
  return 5;
}

TEST(GroupFailure, StuckPeerTimesOut) {
  auto workers = test::spawn_workers("stall", 2);
  auto group = ProcessGroup::connect(workers->rank0(), milliseconds(10000), milliseconds(1000));
  const auto start = Clock::now();
  std::vector<float> x(16, 1.0f);
  try {
    group->all_reduce_sum(x.data(), x.size());
    ADD_FAILURE() << "a collective with a stalled peer succeeded";
  } catch (const Error& e) {
    fmt::print(stderr, "(expected) {}\n", e.what());
  }
  EXPECT_LT(seconds_since(start), 5.0);
  ASSERT_TRUE(workers->wait_exit(8000));
  EXPECT_THAT(workers->dead_worker(), HasSubstr("exited with status 4"));
}

TEST(GroupFailure, JoinTimeoutNamesTheMissingRank) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const RankInfo self{0, 2, 0, dir.path, "127.0.0.1"};
  const auto start = Clock::now();
  try {
    ProcessGroup::connect(self, milliseconds(1000), milliseconds(20000));
    ADD_FAILURE() << "joined a group whose rank 1 never came";
  } catch (const Error& e) {
    fmt::print(stderr, "(expected) {}\n", e.what());
    EXPECT_THAT(e.what(), HasSubstr("rank 1 of 2 did not join within 1000 ms"));
    EXPECT_THAT(e.what(), HasSubstr(dir.path));
  }
  EXPECT_LT(seconds_since(start), 5.0);
  // The directory now holds rank 0's arrival: a second group there is refused at once.
  try {
    ProcessGroup::connect(self, milliseconds(1000), milliseconds(1000));
    ADD_FAILURE() << "a rendezvous directory served two groups";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("already exists"));
  }
}

TEST(GroupFailure, SingleRankGroupAndAbort) {
  TempDir dir;
  auto group = ProcessGroup::connect({0, 1, 0, dir.path, "127.0.0.1"}, milliseconds(5000),
                                     milliseconds(5000));
  GlooCommunicator comm(*group);
  Tensor t = Tensor::host(DType::kF32, {2, 3});
  t.data_as<float>()[4] = 2.5f;
  comm.all_reduce_sum(t);
  EXPECT_EQ(t.data_as<float>()[4], 2.5f);
  Tensor out = Tensor::host(DType::kF32, {2, 3});
  comm.all_gather_columns(t, out);
  EXPECT_EQ(out.data_as<float>()[4], 2.5f);
  EXPECT_EQ(comm.all_reduce_min_host(-3), -3);

  // Checked before any network, so the group stays usable.
  Tensor ints = Tensor::host(DType::kI32, {2, 3});
  EXPECT_THROW(comm.all_reduce_sum(ints), Error);
  Tensor wide = Tensor::host(DType::kF32, {2, 4});
  EXPECT_THROW(comm.all_gather_columns(t, wide), Error);
  EXPECT_THROW(comm.broadcast_host(&t, 4, 1), Error);
  comm.barrier();

  comm.abort("watchdog saw a stuck step");
  try {
    group->barrier();
    ADD_FAILURE() << "an aborted group ran a barrier";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("tensor-parallel rank 0: aborted: watchdog saw a stuck step"));
  }
  EXPECT_THROW(comm.all_reduce_sum(t), Error);
}

TEST(Launch, RolesFromTheEnvironment) {
  char arg0[] = "parallel_tests", list[] = "--gtest_list_tests";
  char* argv[] = {arg0, list, nullptr};
  EXPECT_FALSE(spawned_worker_role(2, argv).has_value());

  setenv("SLURM_PROCID", "3", 1);
  setenv("SLURM_NTASKS", "8", 1);
  setenv("SLURM_LOCALID", "1", 1);
  const std::optional<RankInfo> r = launched_rank_from_env("/shared/rdv");
  unsetenv("SLURM_PROCID");
  unsetenv("SLURM_NTASKS");
  unsetenv("SLURM_LOCALID");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->rank, 3);
  EXPECT_EQ(r->world_size, 8);
  EXPECT_EQ(r->local_rank, 1);
  EXPECT_EQ(r->rendezvous_dir, "/shared/rdv");

  setenv("OMPI_COMM_WORLD_RANK", "2", 1);  // and no size
  EXPECT_THROW(launched_rank_from_env("/shared/rdv"), Error);
  unsetenv("OMPI_COMM_WORLD_RANK");
}

}  // namespace
}  // namespace kestrel
