#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/launch.h"

#include "backend/cuda/cuda_check.h"

namespace kestrel::kernels {

namespace {

// KESTREL_PDL=0 turns it off (for comparisons).
bool pdl_allowed_by_env() {
  const char* v = std::getenv("KESTREL_PDL");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

}  // namespace

bool pdl_enabled() {
  static const bool allowed = pdl_allowed_by_env();
  static std::array<std::atomic<int>, 64> cache{};  // per device: 0 unknown, 1 no, 2 yes
  if (!allowed) return false;
  int device = 0;
  KS_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= static_cast<int>(cache.size())) return false;
  int state = cache[device].load(std::memory_order_relaxed);
  if (state == 0) {
    int major = 0;
    KS_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    state = major >= 9 ? 2 : 1;
    cache[device].store(state, std::memory_order_relaxed);
  }
  return state == 2;
}

}  // namespace kestrel::kernels
