#include "runtime/progress_bar.h"

#include <unistd.h>

#include <cstdio>

namespace kestrel {

ProgressBar::ProgressBar(size_t total, bool enabled) : total_(total), enabled_(enabled && isatty(2)) {}

void ProgressBar::update(size_t done, double prefill_tps, double decode_tps) {
  if (!enabled_) return;
  const Clock::time_point now = Clock::now();
  if (done < total_ && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  constexpr int kWidth = 30;
  const int filled = total_ ? static_cast<int>(kWidth * done / total_) : kWidth;
  char eta[32] = "?";
  if (done > 0) std::snprintf(eta, sizeof(eta), "%.0fs", elapsed * double(total_ - done) / double(done));
  // \033[K clears what a longer earlier line left behind.
  std::fprintf(stderr,
               "\rGenerating [%.*s%*s] %zu/%zu  prefill %.0f tok/s  decode %.0f tok/s  %.0fs elapsed, "
               "ETA %s\033[K",
               filled, "==============================", kWidth - filled, "", done, total_,
               prefill_tps, decode_tps, elapsed, eta);
  if (done == total_) std::fputc('\n', stderr);
}

}  // namespace kestrel
