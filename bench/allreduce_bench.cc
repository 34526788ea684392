// What a tensor-parallel all-reduce costs at the sizes the decode and prompt steps use
// (docs/parallel.md): ranks as threads of one process, one per GPU, each with the CUDA
// backend and the NCCL communicator, so every path of NcclCommunicator is timed as the model
// calls it. Per path and size, a CUDA graph of kCalls all-reduces of one tensor is replayed
// (as the decode steps run them) in kRounds rounds, each started on a host barrier; a round's
// time per call is the wall time of its replays over their calls, every rank's stream
// synchronized, the slowest rank's. The table gives the median round and the worst (one
// stalled host thread, whose peers spin while it is late, shows in the worst). The bus bandwidth is
// 2 (N - 1) / N x bytes / time, NCCL's measure, to set beside the link's.
//
// Paths (each a fresh group, since the ranks agree on them at start):
//   ll        the low-latency peer kernel (tensors <= 16 KiB; the default at two ranks,
//             KESTREL_PEER_LL=1 here at any size of group)
//   oneshot   the one-shot peer kernel (KESTREL_PEER_LL=0), up to 4 MiB; at two ranks it
//             pushes (stores into the peer's buffer), and `pull` is it loading the peer's
//             (KESTREL_PEER_PUSH=0)
//   os-1ld    oneshot with one load in flight a thread (KESTREL_PEER_UNROLL=0; two ranks),
//             from 256 KiB; os-64 and os-128 on 64 and 128 blocks (KESTREL_PEER_BLOCKS; the
//             other paths take KESTREL_PEER_BLOCKS from the environment, default 32)
//   twoshot   the two-shot peer kernel (KESTREL_PEER_TWO_SHOT_BYTES), 64 KiB to 4 MiB, on
//             32 blocks; ts-128 on 128 (KESTREL_PEER_TWO_SHOT_BLOCKS), from 256 KiB
//   nccl      NCCL's all-reduce (KESTREL_CUSTOM_ALLREDUCE=0)
// each as all_reduce_sum, as all_reduce_add (the sum added into a residual: the fused decode
// path's form), and, in rows of 4,096 (Qwen3-8B's hidden size), as the unfused decode path's
// all_reduce_sum then the backend's add_rms_norm ("norm"). Inputs are random (never zeros); the sums grow over the calls, up to
// infinities, which no path's time depends on.
//
// Build: ninja allreduce_bench (KESTREL_CUDA=ON with NCCL); run on 2+ GPUs:
//   build-gpu/bench/allreduce_bench [ranks (default: every GPU)] [KiB ... (default: decode
//   and prompt sizes of Qwen3-8B, 8 KiB to 4 MiB)]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/collectives/nccl_thread_ranks.h"
#include "core/error.h"
#include "cuda_bench_util.h"

namespace kestrel {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kCalls = 50;    // all-reduces in one graph
constexpr int kReplays = 4;   // graph replays timed in a round
constexpr int kRounds = 9;

struct Path {
  const char* name;
  const char* ll;               // KESTREL_PEER_LL
  const char* custom;           // KESTREL_CUSTOM_ALLREDUCE
  const char* two_shot_bytes;   // KESTREL_PEER_TWO_SHOT_BYTES
  const char* two_shot_blocks;  // KESTREL_PEER_TWO_SHOT_BLOCKS
  const char* push;             // KESTREL_PEER_PUSH
  const char* blocks;           // KESTREL_PEER_BLOCKS
  const char* unroll;           // KESTREL_PEER_UNROLL
  size_t min_kib, max_kib;      // other sizes are not this path's
};

enum class Op { kSum, kAdd, kNorm };
constexpr const char* kOpNames[] = {"sum", "add", "norm"};
constexpr int64_t kNormRow = 4096;

struct Timing {
  double median = -1.0, worst = -1.0;  // seconds per call
};

// Per size, the median and the worst round's seconds per call, the slowest rank's in each.
std::vector<Timing> time_path(int ranks, const std::vector<size_t>& kib,
                              const std::vector<std::vector<Tensor>>& inputs, Op op) {
  // seconds[r][i][round]
  std::vector<std::vector<std::vector<double>>> seconds(
      ranks, std::vector<std::vector<double>>(kib.size(), std::vector<double>(kRounds)));
  const std::vector<std::string> errors =
      run_nccl_ranks(ranks, [&](int r, Backend& backend, Communicator& comm) {
        for (size_t i = 0; i < kib.size(); ++i) {
          const bool rows = op == Op::kNorm;
          const Shape shape = rows ? Shape{inputs[r][i].numel() / kNormRow, kNormRow}
                                   : inputs[r][i].shape();
          Tensor t = backend.upload(inputs[r][i], DType::kBF16).view(shape);
          // The residual is the same on every rank (all_reduce_add's contract).
          Tensor residual = backend.upload(inputs[0][i], DType::kBF16).view(shape);
          Tensor weight;
          if (rows) weight = backend.upload(cuda_bench::random_bf16_host(Shape{kNormRow}), DType::kBF16);
          auto call = [&] {
            switch (op) {
              case Op::kSum: comm.all_reduce_sum(t); break;
              case Op::kAdd: comm.all_reduce_add(t, residual); break;
              case Op::kNorm:
                comm.all_reduce_sum(t);
                backend.add_rms_norm(t, residual, weight, 1e-6f);
                break;
            }
          };
          call();  // eager once: any scratch is sized before the capture
          backend.synchronize();
          auto graph = backend.capture_graph([&] {
            for (int k = 0; k < kCalls; ++k) call();
          });
          graph->replay();
          backend.synchronize();
          for (int round = 0; round < kRounds; ++round) {
            comm.barrier();
            const auto t0 = Clock::now();
            for (int k = 0; k < kReplays; ++k) graph->replay();
            backend.synchronize();
            seconds[r][i][round] = std::chrono::duration<double>(Clock::now() - t0).count() /
                                   (kReplays * kCalls);
          }
          comm.barrier();
        }
        comm.barrier();  // no rank frees its peer-mapped memory while another still reads it
      });
  for (int r = 0; r < ranks; ++r) {
    KS_CHECK(errors[r].empty(), "rank {}: {}", r, errors[r]);
  }
  std::vector<Timing> timings(kib.size());
  for (size_t i = 0; i < kib.size(); ++i) {
    std::vector<double> slowest(kRounds, 0.0);
    for (int round = 0; round < kRounds; ++round) {
      for (int r = 0; r < ranks; ++r) {
        slowest[round] = std::max(slowest[round], seconds[r][i][round]);
      }
    }
    std::sort(slowest.begin(), slowest.end());
    timings[i] = {slowest[kRounds / 2], slowest.back()};
  }
  return timings;
}

int run(int argc, char** argv) {
  int devices = 0;
  KS_CUDA_CHECK(cudaGetDeviceCount(&devices));
  const int ranks = argc > 1 ? std::atoi(argv[1]) : devices;
  KS_CHECK(ranks >= 2 && ranks <= devices, "allreduce_bench: {} ranks on {} GPUs (needs 2+)",
           ranks, devices);
  std::vector<size_t> kib;
  for (int i = 2; i < argc; ++i) kib.push_back(static_cast<size_t>(std::atoll(argv[i])));
  // Qwen3-8B (hidden 4,096, bf16): decode steps of 1, 2, 8, 32, 128 and 256 tokens, a
  // 512-row step (the peer buffer's 4 MiB) and beyond it.
  if (kib.empty()) kib = {8, 16, 64, 256, 1024, 2048, 4096, 8192};
  std::vector<std::vector<Tensor>> inputs(ranks);
  for (int r = 0; r < ranks; ++r) {
    for (size_t k : kib) {
      KS_CHECK(k > 0, "allreduce_bench: sizes are positive KiB");
      inputs[r].push_back(cuda_bench::random_bf16_host(Shape{int64_t(k) * 512}));
    }
  }
  const char* blocks = std::getenv("KESTREL_PEER_BLOCKS");  // the default path's grid
  if (blocks == nullptr) blocks = "32";
  const Path paths[] = {{"ll", "1", "1", "0", "32", "1", blocks, "1", 0, 16},
                        {"oneshot", "0", "1", "0", "32", "1", blocks, "1", 0, 4096},
                        {"os-1ld", "0", "1", "0", "32", "1", blocks, "0", 256, 4096},
                        {"os-64", "0", "1", "0", "32", "1", "64", "1", 256, 4096},
                        {"os-128", "0", "1", "0", "32", "1", "128", "1", 256, 4096},
                        {"pull", "0", "1", "0", "32", "0", blocks, "1", 0, 4096},
                        {"twoshot", "0", "1", "16", "32", "1", blocks, "1", 64, 4096},
                        {"ts-128", "0", "1", "16", "128", "1", blocks, "1", 256, 4096},
                        {"nccl", "0", "0", "0", "32", "1", blocks, "1", 0, ~size_t{0}}};
  std::printf("%d ranks; us per all-reduce in a CUDA graph of %d, %d replays a round, median and "
              "worst of %d rounds; busbw = 2 (N-1)/N x bytes / median\n",
              ranks, kCalls, kReplays, kRounds);
  std::printf("%-8s %-5s %9s %10s %10s %12s\n", "path", "op", "KiB", "us/call", "worst us",
              "busbw GB/s");
  for (const Path& p : paths) {
    if (ranks > 2 && std::string(p.name) == "pull") continue;  // oneshot pulls there
    setenv("KESTREL_PEER_LL", p.ll, 1);
    setenv("KESTREL_CUSTOM_ALLREDUCE", p.custom, 1);
    setenv("KESTREL_PEER_TWO_SHOT_BYTES", p.two_shot_bytes, 1);
    setenv("KESTREL_PEER_TWO_SHOT_BLOCKS", p.two_shot_blocks, 1);
    setenv("KESTREL_PEER_PUSH", p.push, 1);
    setenv("KESTREL_PEER_BLOCKS", p.blocks, 1);
    setenv("KESTREL_PEER_UNROLL", p.unroll, 1);
    std::vector<size_t> mine;
    std::vector<std::vector<Tensor>> my_inputs(ranks);
    for (size_t i = 0; i < kib.size(); ++i) {
      if (kib[i] < p.min_kib || kib[i] > p.max_kib) continue;
      mine.push_back(kib[i]);
      for (int r = 0; r < ranks; ++r) my_inputs[r].push_back(inputs[r][i]);
    }
    if (mine.empty()) continue;
    for (Op op : {Op::kSum, Op::kAdd, Op::kNorm}) {
      // The norm: whole rows of 4,096.
      std::vector<size_t> sizes;
      std::vector<std::vector<Tensor>> op_inputs(ranks);
      for (size_t i = 0; i < mine.size(); ++i) {
        if (op == Op::kNorm && mine[i] * 512 % kNormRow != 0) continue;
        sizes.push_back(mine[i]);
        for (int r = 0; r < ranks; ++r) op_inputs[r].push_back(my_inputs[r][i]);
      }
      if (sizes.empty()) continue;
      const std::vector<Timing> s = time_path(ranks, sizes, op_inputs, op);
      for (size_t i = 0; i < sizes.size(); ++i) {
        const double bytes = double(sizes[i]) * 1024.0;
        const double busbw = 2.0 * (ranks - 1) / ranks * bytes / s[i].median / 1e9;
        std::printf("%-8s %-5s %9zu %10.2f %10.2f %12.1f\n", p.name, kOpNames[static_cast<int>(op)],
                    sizes[i], s[i].median * 1e6, s[i].worst * 1e6, busbw);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace kestrel

int main(int argc, char** argv) {
  try {
    return kestrel::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_bench: %s\n", e.what());
    return 1;
  }
}
