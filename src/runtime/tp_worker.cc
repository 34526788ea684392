#include "runtime/tp_worker.h"

#include <cstdio>
#include <exception>

#include "core/error.h"
#include "core/logging.h"
#include "kestrel/worker.h"
#include "parallel/local_workers.h"
#include "runtime/model_runner.h"
#include "runtime/tp_protocol.h"

namespace kestrel {

int run_tensor_parallel_worker(const RankInfo& role) {
  // Rank 0 logs for the group; a worker speaks only of trouble.
  if (spdlog::get_level() < spdlog::level::warn) spdlog::set_level(spdlog::level::warn);
  try {
    std::unique_ptr<ProcessGroup> group = ProcessGroup::connect(role, kTpJoinTimeout, kTpOpTimeout);
    const StartupMessage start = broadcast_startup(*group, StartupMessage{});
    const TensorParallelRank tp{group.get(), role.local_rank};
    ModelRunner runner(start.model_dir, start.config, &tp);
    HostBatch hb;
    while (true) {
      const StepHeader h = receive_step(*group, hb);
      switch (h.kind) {
        case StepKind::kForward:
          runner.join_sampling(hb, runner.run_forward(hb));
          if (!hb.prompt_rows.empty()) runner.run_prompt_logits(hb, nullptr);
          break;
        case StepKind::kTimeDecode:
          runner.time_decode_forward(h.args[0], h.args[1], h.args[2]);
          break;
        case StepKind::kKvClamped:
          runner.kv_cache_clamped();
          break;
        case StepKind::kShutdown:
          runner.backend().synchronize();
          return 0;
        default:
          throw_error("unknown step kind {} from rank 0", static_cast<int>(h.kind));
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kestrel: tensor-parallel rank %d of %d: %s\n", role.rank,
                 role.world_size, e.what());
    return 1;
  }
}

std::optional<int> run_worker_if_spawned(int argc, char** argv) {
  std::optional<RankInfo> role;
  try {
    role = spawned_worker_role(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kestrel: tensor-parallel worker: %s\n", e.what());
    return 1;
  }
  if (!role) return std::nullopt;
  return run_tensor_parallel_worker(*role);
}

}  // namespace kestrel
