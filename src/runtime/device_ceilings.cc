#include "runtime/device_ceilings.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"

namespace kestrel {
namespace {

constexpr size_t kCopyBytes = size_t{1} << 30;  // per copy timed (device_ceilings.h)

// Random bf16 in [-1, 1) (never zeros: a GEMM on zeros runs faster than on real data).
Tensor random_bf16(Backend& backend, int64_t rows, int64_t cols, uint64_t seed) {
  Tensor h = Tensor::host(DType::kBF16, {rows, cols});
  auto* p = h.data_as<uint16_t>();
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int64_t i = 0; i < h.numel(); ++i) {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    const float u = static_cast<float>((s * 0x2545f4914f6cdd1dull) >> 40) / float(1 << 23) - 1.0f;
    p[i] = f32_to_bf16(u);
  }
  return backend.upload(h, DType::kBF16);
}

}  // namespace

double measure_copy_rate(const std::string& device) {
  std::unique_ptr<Backend> backend = make_backend(device, 0);
  if (backend->device() == Device::kCpu) return 0.0;
  return backend->measure_copy_bandwidth(kCopyBytes);
}

DeviceCeilings measure_device_ceilings(const std::string& device) {
  std::unique_ptr<Backend> backend = make_backend(device, 0);
  DeviceCeilings c;
  c.device = backend->name();
  if (backend->device() == Device::kCpu) return c;

  c.copy_bytes_per_second = backend->measure_copy_bandwidth(kCopyBytes);

  constexpr int kN = 8192, kWarmup = 2, kReps = 10;
  c.gemm_size = kN;
  const Tensor x = random_bf16(*backend, kN, kN, 1);
  const Tensor w = random_bf16(*backend, kN, kN, 2);
  Tensor out = backend->empty(DType::kBF16, {kN, kN});
  for (int i = 0; i < kWarmup; ++i) backend->linear(x, w, Tensor(), out);
  backend->synchronize();
  std::vector<double> seconds;
  for (int i = 0; i < kReps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    backend->linear(x, w, Tensor(), out);
    backend->synchronize();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[kReps / 2];
  c.gemm_flops_per_second = median > 0 ? 2.0 * kN * double(kN) * kN / median : 0;
  return c;
}

}  // namespace kestrel
