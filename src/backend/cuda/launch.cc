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

namespace {

// cudaDeviceGetAttribute's answers on the current device, asked once per (device, attribute)
// and process; f(device) computes it, 0 meaning "not yet asked".
template <typename F>
int per_device(std::array<std::atomic<int>, 64>& cache, F f) {
  int device = 0;
  KS_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= static_cast<int>(cache.size())) return 0;
  int v = cache[device].load(std::memory_order_relaxed);
  if (v == 0) {
    v = f(device);
    cache[device].store(v, std::memory_order_relaxed);
  }
  return v;
}

int attribute(cudaDeviceAttr attr, int device) {
  int v = 0;
  KS_CUDA_CHECK(cudaDeviceGetAttribute(&v, attr, device));
  return v;
}

}  // namespace

int compute_capability() {
  static std::array<std::atomic<int>, 64> cache{};
  return per_device(cache, [](int device) {
    return 10 * attribute(cudaDevAttrComputeCapabilityMajor, device) +
           attribute(cudaDevAttrComputeCapabilityMinor, device);
  });
}

int multiprocessor_count() {
  static std::array<std::atomic<int>, 64> cache{};
  return per_device(cache, [](int device) { return attribute(cudaDevAttrMultiProcessorCount, device); });
}

bool pdl_enabled() {
  static const bool allowed = pdl_allowed_by_env();
  return allowed && compute_capability() >= 90;
}

}  // namespace kestrel::kernels
