// A one-line progress bar on stderr for long offline runs (LLM::generate, kestrel bench),
// like nano-vLLM's tqdm: requests done, prefill and decode throughput, elapsed time and an
// estimate of the rest. Drawn only when stderr is a terminal (never into a pipe or a log),
// and redrawn at most every 100 ms.
#pragma once

#include <chrono>
#include <cstddef>

namespace kestrel {

class ProgressBar {
 public:
  ProgressBar(size_t total, bool enabled);
  // `done` of the total finished; throughputs in tokens per second.
  void update(size_t done, double prefill_tps, double decode_tps);

 private:
  using Clock = std::chrono::steady_clock;
  size_t total_;
  bool enabled_;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_{};
};

}  // namespace kestrel
