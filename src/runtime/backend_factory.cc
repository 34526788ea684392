#include <thread>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#if KESTREL_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace kestrel {

std::unique_ptr<Backend> make_backend(const std::string& device, int num_threads,
                                      int device_index) {
#if KESTREL_WITH_CUDA
  if (device == "cuda" || (device == "auto" && cuda_device_available())) {
    KS_CHECK(cuda_device_available(), "--device cuda: no CUDA device is available");
    return make_cuda_backend(device_index);
  }
#else
  KS_CHECK(device != "cuda", "--device cuda: this build has no CUDA backend (nvcc was not found)");
#endif
  KS_CHECK(device == "auto" || device == "cpu" || device == "cuda",
           "unknown device '{}' (expected auto, cpu or cuda)", device);
  return make_cpu_backend(num_threads);
}

}  // namespace kestrel
