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

int compute_capability() {
  static std::array<std::atomic<int>, 64> cache{};  // per device: 0 = not yet asked
  int device = 0;
  KS_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= static_cast<int>(cache.size())) return 0;
  int cc = cache[device].load(std::memory_order_relaxed);
  if (cc == 0) {
    int major = 0, minor = 0;
    KS_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    KS_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    cc = 10 * major + minor;
    cache[device].store(cc, std::memory_order_relaxed);
  }
  return cc;
}

bool pdl_enabled() {
  static const bool allowed = pdl_allowed_by_env();
  return allowed && compute_capability() >= 90;
}

}  // namespace kestrel::kernels
