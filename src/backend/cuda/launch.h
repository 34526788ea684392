// Host side of launch.cuh: whether kernel launches on the current device use programmatic
// dependent launch. Usable from .cc files (the CUDA graph runner and benchmarks report it).
#pragma once

namespace kestrel::kernels {

// True on sm_90+ devices unless KESTREL_PDL=0 is set in the environment; the answer is
// computed once per device and process. H100: single-stream decode 812 -> 909 tok/s.
bool pdl_enabled();

}  // namespace kestrel::kernels
