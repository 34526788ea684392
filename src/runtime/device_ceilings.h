// The two ceilings a benchmark's floors are computed from, measured on the device itself
// (METHOD: measure, do not trust datasheets): device-to-device copy bandwidth and the bf16
// GEMM rate, both through the production backend.
#pragma once

#include <string>

namespace kestrel {

struct DeviceCeilings {
  std::string device;               // the backend's name
  double copy_bytes_per_second = 0;  // bytes read + written; 0: not measured (CPU)
  double gemm_flops_per_second = 0;  // 0: not measured (CPU)
  int gemm_size = 0;                 // n of the n x n x n GEMM timed
};

// The copy rate alone (Backend::measure_copy_bandwidth through a fresh backend for
// `device`); 0 on the CPU. Its buffers are plain allocations, given back at once, so it may
// run before an engine takes the device's memory.
double measure_copy_rate(const std::string& device);

// Makes a backend for `device` ("cuda", "cpu", "auto"), times a 1 GiB copy
// (Backend::measure_copy_bandwidth) and an 8192^3 Backend::linear on random bf16 data
// (median of 10 after 2 warm-ups). Takes about a second on a GPU; the CPU is not measured.
// Run it when nothing else holds the device's memory (the GEMM's 400 MB stay in the
// backend's pool until the process ends). Throws kestrel::Error when the device is missing.
DeviceCeilings measure_device_ceilings(const std::string& device);

}  // namespace kestrel
