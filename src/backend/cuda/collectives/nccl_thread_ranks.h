// N tensor-parallel ranks as threads of one process, rank r on GPU r with the CUDA backend
// and an NCCL communicator whose host side is a ThreadCommunicator: for tests and
// benchmarks of the collectives on one machine without starting processes.
#pragma once

#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/collectives/nccl_communicator.h"
#include "backend/cuda/cuda_backend.h"
#include "parallel/thread_communicator.h"

namespace kestrel {

// Runs body(rank, backend, comm) on `ranks` threads and returns each rank's error message
// ("" for none). A rank that throws makes the others' host waits (barriers, broadcasts)
// throw too, rather than wait for it.
inline std::vector<std::string> run_nccl_ranks(
    int ranks, const std::function<void(int, Backend&, Communicator&)>& body) {
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  ThreadGroup group(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto backend = make_cuda_backend(r);
        ThreadCommunicator host(group, r);
        auto comm = make_nccl_communicator(*backend, host);
        body(r, *backend, *comm);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        group.abort_all();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace kestrel
