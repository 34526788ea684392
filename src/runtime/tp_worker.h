// The other ranks of a tensor-parallel group (rank >= 1): join the group, take rank 0's
// model directory and config, load this rank's shard, then run every step rank 0
// broadcasts until it says stop or dies (docs/parallel.md).
#pragma once

#include <optional>

#include "kestrel/engine_config.h"
#include "parallel/process_group.h"

namespace kestrel {

// Runs rank `role.rank` (>= 1) to the end. Returns the process exit status: 0 after rank
// 0's shutdown, 1 after an error (printed to stderr, naming the rank).
int run_tensor_parallel_worker(const RankInfo& role);

// How long ranks wait for each other to join, and for one operation (the wait for the next
// step included: an idle server sends none, so this is long; a dead peer fails it at once).
constexpr std::chrono::milliseconds kTpJoinTimeout{120'000};
constexpr std::chrono::milliseconds kTpOpTimeout{std::chrono::hours(24 * 7)};

}  // namespace kestrel
