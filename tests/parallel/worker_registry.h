// Worker registry of parallel_tests: how a test names the code its spawned ranks run.
//
// The test binary starts copies of itself as ranks 1..N-1 (parallel/local_workers.h); each
// copy's main() (main.cc) finds its role and runs the worker function the spawning test
// named in KESTREL_TEST_WORKER. Rank 0 is the test itself.
//
//   KS_TP_WORKER(my_worker) {       // int my_worker(const kestrel::RankInfo& self)
//     auto group = ...connect(self)...;
//     return ok ? 0 : 1;            // the worker's exit status
//   }
//   TEST(X, Y) {
//     auto workers = kestrel::test::spawn_workers("my_worker", 2);
//     ...rank 0's side..., then workers->wait_exit(...)
//   }
//
// A worker returns its process exit status; an exception escaping it becomes status 2 (its
// message on stderr). Registration happens during static initialisation, so a worker may
// be defined in any *_test.cc of the binary.
#pragma once

#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "parallel/local_workers.h"

namespace kestrel::test {

using WorkerFn = int (*)(const RankInfo& self);

// Names the worker function the children of the next LocalWorkers run (they inherit it).
constexpr const char* kWorkerEnv = "KESTREL_TEST_WORKER";

// Function-local: safe to use from other translation units' static initialisers.
inline std::map<std::string, WorkerFn>& worker_registry() {
  static std::map<std::string, WorkerFn> registry;
  return registry;
}

struct WorkerRegistrar {
  WorkerRegistrar(const char* name, WorkerFn fn) { worker_registry()[name] = fn; }
};

// Starts ranks 1..world_size-1 running worker `name` (which must be registered).
inline std::unique_ptr<LocalWorkers> spawn_workers(const std::string& name, int world_size) {
  setenv(kWorkerEnv, name.c_str(), 1);
  return std::make_unique<LocalWorkers>(world_size);
}

}  // namespace kestrel::test

// Defines and registers worker `name`; the body follows, with `self` its RankInfo.
#define KS_TP_WORKER(name)                                                     \
  static int ks_tp_worker_##name(const ::kestrel::RankInfo& self);             \
  static const ::kestrel::test::WorkerRegistrar ks_tp_worker_registrar_##name( \
      #name, &ks_tp_worker_##name);                                            \
  static int ks_tp_worker_##name(const ::kestrel::RankInfo& self)
