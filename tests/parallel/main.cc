// parallel_tests' main: a spawned rank runs its worker (worker_registry.h); any other
// invocation (a test run, ctest's --gtest_list_tests) is an ordinary gtest binary.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>

#include "parallel/local_workers.h"
#include "worker_registry.h"

namespace {

int run_worker(const kestrel::RankInfo& self) {
  const char* name = std::getenv(kestrel::test::kWorkerEnv);
  const auto& registry = kestrel::test::worker_registry();
  const auto it = name ? registry.find(name) : registry.end();
  if (it == registry.end()) {
    std::fprintf(stderr, "tensor-parallel rank %d: no worker named '%s' is registered (%s)\n",
                 self.rank, name ? name : "", kestrel::test::kWorkerEnv);
    return 3;
  }
  try {
    return it->second(self);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tensor-parallel rank %d: worker '%s' failed: %s\n", self.rank, name,
                 e.what());
    return 2;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<kestrel::RankInfo> role;
  try {
    role = kestrel::spawned_worker_role(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  if (role) return run_worker(*role);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
