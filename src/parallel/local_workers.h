// LocalWorkers: ranks 1..N-1 of a tensor-parallel group on this host, started by rank 0 as
// copies of its own executable (/proc/self/exe), so that `--tensor-parallel-size N` needs
// no launcher. Processes rather than threads: one CUDA context and one failure domain per
// rank, and the same code path as ranks a launcher starts on several hosts
// (docs/parallel.md).
//
// A worker is started as `<exe> --kestrel-tp-worker` with the parent's environment plus its
// RankInfo (KESTREL_TP_RANK, KESTREL_TP_WORLD_SIZE, KESTREL_TP_LOCAL_RANK,
// KESTREL_TP_RENDEZVOUS, KESTREL_TP_HOST = 127.0.0.1) and KESTREL_TP_PARENT_PID. Every
// main() that may start workers (the kestrel CLI, the test binaries that run tensor
// parallelism, the Python module's host) must therefore call spawned_worker_role() first
// and, when it returns a role, run as that rank instead of its usual work.
//
// Workers die with rank 0: spawned_worker_role() sets PR_SET_PDEATHSIG (SIGKILL). Linux
// sends it when the *thread* that started the worker ends, so construct LocalWorkers on a
// thread that lives as long as the workers (the main thread).
//
// Shutdown order on rank 0: destroy (or let fail) rank 0's ProcessGroup before LocalWorkers,
// so workers blocked on rank 0 see its sockets close and exit by themselves within the
// destructor's grace period instead of being killed.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "parallel/process_group.h"

namespace kestrel {

class LocalWorkers {
 public:
  // Makes a private rendezvous directory (mkdtemp under $TMPDIR or /tmp) and starts ranks
  // 1..world_size-1 (local_rank = rank). Throws kestrel::Error when a process cannot be
  // started. world_size >= 1 (1: only the directory, for a group of rank 0 alone).
  // `command`: the program and its first arguments (looked up on PATH) that each worker runs
  // with --kestrel-tp-worker after them; empty: this executable.
  explicit LocalWorkers(int world_size, std::vector<std::string> command = {});
  // Waits up to kShutdownGraceMs for workers to exit by themselves, kills (SIGKILL) and
  // reaps the rest, and removes the rendezvous directory.
  ~LocalWorkers();
  static constexpr int kShutdownGraceMs = 3000;
  LocalWorkers(const LocalWorkers&) = delete;
  LocalWorkers& operator=(const LocalWorkers&) = delete;

  // Rank 0's own RankInfo in this group.
  RankInfo rank0() const;
  const std::string& rendezvous_dir() const { return dir_; }

  // Empty while every worker runs; otherwise says which rank ended and how: "tensor-parallel
  // rank 2 (pid 1234) was killed by signal 9 (Killed)" / "... exited with status 1". When
  // several ended it names the likeliest cause of the others' end: a rank killed by a signal
  // before one that exited with a nonzero status (as survivors of a dead peer do), before
  // one that exited with status 0; among equals, the one found ended first. So "exited with
  // status 0" after wait_exit() means every worker did. Never blocks; reaps the workers
  // that ended (waitpid WNOHANG) and remembers how.
  std::string dead_worker();
  // Waits up to `ms` milliseconds for every worker to exit by itself (after a shutdown
  // message); true when they all did. Reaps them, as dead_worker() does.
  bool wait_exit(int ms);
  // How rank `rank` (1..world_size-1) ended, in dead_worker()'s words; empty while it runs.
  // Never blocks.
  std::string worker_end(int rank);

 private:
  void reap();

  int world_size_ = 0;
  std::string dir_;
  std::vector<pid_t> pids_;         // index r - 1 for rank r
  std::vector<int> exit_status_;    // waitpid status once reaped, else kNotReaped (-1)
  std::vector<size_t> reap_order_;  // indices into pids_, in the order they were reaped
};

// The role a LocalWorkers parent gave this process, when argv[1] is --kestrel-tp-worker;
// nullopt otherwise (any other argv, e.g. gtest's --gtest_list_tests). With the flag, also
// arranges for this process to be killed when its parent ends (PR_SET_PDEATHSIG). Throws
// kestrel::Error when the flag is there but the environment is incomplete or malformed, or
// when the parent has already exited.
std::optional<RankInfo> spawned_worker_role(int argc, char** argv);

// A process a launcher started on some host (mpirun: OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK;
// Slurm: SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID; or KESTREL_TP_RANK/_WORLD_SIZE/
// _LOCAL_RANK set by hand; the first family whose rank variable is set wins), with the shared
// `rendezvous_dir`; host from KESTREL_TP_HOST, else empty (this host's name at connect).
// nullopt when no launcher variables are set. Throws kestrel::Error when a family is
// incomplete (e.g. a rank without a size) or its values are not integers in range.
std::optional<RankInfo> launched_rank_from_env(const std::string& rendezvous_dir);

}  // namespace kestrel
