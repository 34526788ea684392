// Tensor-parallel worker processes. With tensor_parallel_size N on one host the engine
// starts ranks 1..N-1 as copies of the running executable, marked by their arguments; a
// program that creates an LLM with N > 1 must therefore begin main() with
//
//   if (std::optional<int> rc = kestrel::run_worker_if_spawned(argc, argv)) return *rc;
//
// so that those copies become workers instead of running the program again.
#pragma once

#include <optional>

namespace kestrel {

// When this process was started as a tensor-parallel worker, runs it to the end and
// returns its exit status; otherwise returns nullopt at once.
std::optional<int> run_worker_if_spawned(int argc, char** argv);

}  // namespace kestrel
