// LocalWorkers: ranks 1..N-1 of a tensor-parallel group on this host, started by rank 0 as
// copies of its own executable (/proc/self/exe), so that `--tensor-parallel-size N` needs
// no launcher. Processes rather than threads: one CUDA context and one failure domain per
// rank, and the same code path as ranks a launcher starts on several hosts
// (docs/parallel.md).
//
// A worker is started as `<exe> --kestrel-tp-worker` with its RankInfo in the environment
// (KESTREL_TP_RANK, KESTREL_TP_WORLD_SIZE, KESTREL_TP_LOCAL_RANK, KESTREL_TP_RENDEZVOUS,
// KESTREL_TP_HOST). Every main() that may start workers (the kestrel CLI, the test
// binaries that run tensor parallelism, the Python module's host) must therefore call
// run_worker_if_spawned() first. Workers die with rank 0 (PR_SET_PDEATHSIG).
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
  // started. world_size >= 2.
  explicit LocalWorkers(int world_size);
  // Kills workers still running after a grace period (shutdown_grace_ms) and removes the
  // directory.
  ~LocalWorkers();
  LocalWorkers(const LocalWorkers&) = delete;
  LocalWorkers& operator=(const LocalWorkers&) = delete;

  // Rank 0's own RankInfo in this group.
  RankInfo rank0() const;
  const std::string& rendezvous_dir() const { return dir_; }

  // Empty while every worker runs; otherwise says which rank ended and how: "tensor-parallel
  // rank 2 (pid 1234) was killed by signal 9" / "... exited with status 1". Never blocks.
  std::string dead_worker();
  // Waits up to `ms` milliseconds for every worker to exit by itself (after a shutdown
  // message); true when they all did.
  bool wait_exit(int ms);

 private:
  int world_size_ = 0;
  std::string dir_;
  std::vector<pid_t> pids_;       // index r - 1 for rank r
  std::vector<int> exit_status_;  // waitpid status once reaped, else -1
};

// The role a LocalWorkers parent gave this process, when argv[1] is --kestrel-tp-worker;
// nullopt otherwise. Throws kestrel::Error when the flag is there but the environment is
// incomplete.
std::optional<RankInfo> spawned_worker_role(int argc, char** argv);

// A process a launcher started on some host (mpirun: OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK;
// Slurm: SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID; or KESTREL_TP_RANK/_WORLD_SIZE/
// _LOCAL_RANK set by hand), with the shared `rendezvous_dir`. nullopt when no launcher
// variables are set.
std::optional<RankInfo> launched_rank_from_env(const std::string& rendezvous_dir);

}  // namespace kestrel
