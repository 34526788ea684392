// Host side of launch.cuh: whether kernel launches on the current device use programmatic
// dependent launch, and the device's compute capability that decides it. Usable from .cc
// files (the CUDA graph runner and benchmarks report it).
#pragma once

namespace kestrel::kernels {

// True on sm_90+ devices unless KESTREL_PDL=0 is set in the environment; the answer is
// computed once per device and process. H100: single-stream decode 812 -> 909 tok/s.
bool pdl_enabled();

// The current device's compute capability as 10 major + minor (90 for sm_90), queried once
// per device and process; 0 for a device index past the cache (64 devices).
int compute_capability();

// The current device's number of multiprocessors, queried the same way (0 past the cache).
int multiprocessor_count();

}  // namespace kestrel::kernels
