// Kernel launches with programmatic dependent launch (PDL, Hopper and later).
//
// A decode step at low batch is ~200 short kernels in a CUDA graph; between two of them the
// GPU idles while the next grid is launched and its blocks start. With PDL the next kernel
// may be launched while the previous one still runs: its blocks do whatever does not depend
// on the previous kernel (index maths, loads of weights) and then wait in pdl_wait() until
// the previous grid has finished and its writes are visible.
//
// Contract for a kernel launched with launch_pdl(): every block calls pdl_wait() before its
// first access to memory that an earlier kernel writes, and before its first write to memory
// that an earlier kernel reads; until then it may only read memory no kernel of the step
// writes (weights). Calling it first thing is always correct. A kernel that returns early
// must still have called it: completion of a grid is what the next one waits for, so a grid
// that finished without waiting would let its successors overtake its predecessor.
// pdl_trigger() lets the dependents launch early; without it they launch at completion.
//
// On devices before sm_90 (and with KESTREL_PDL=0 in the environment, for comparisons) the
// launch is an ordinary stream-ordered one and both device calls compile to nothing.
#pragma once

#include <cuda_runtime.h>

#include <mutex>
#include <utility>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.h"

namespace kestrel::kernels {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Enqueues kernel<<<grid, block, smem, stream>>>(args...) with PDL where pdl_enabled(), in
// thread-block clusters of cluster_x x 1 x 1 CTAs when cluster_x > 0 (sm_90+; grid.x a
// multiple of it). `name` is for the error message; launch errors throw kestrel::Error.
template <typename... Params, typename... Args>
void launch_pdl_cluster(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block,
                        size_t smem, int cluster_x, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr[2];
  unsigned num_attrs = 0;
  if (cluster_x > 0) {
    attr[num_attrs].id = cudaLaunchAttributeClusterDimension;
    attr[num_attrs].val.clusterDim.x = static_cast<unsigned>(cluster_x);
    attr[num_attrs].val.clusterDim.y = 1;
    attr[num_attrs].val.clusterDim.z = 1;
    ++num_attrs;
  }
  if (pdl_enabled()) {
    attr[num_attrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[num_attrs].val.programmaticStreamSerializationAllowed = 1;
    ++num_attrs;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = num_attrs;
  const cudaError_t err = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (err != cudaSuccess) ::kestrel::cuda_fail(err, name, __FILE__, __LINE__);
}

template <typename... Params, typename... Args>
void launch_pdl(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                cudaStream_t stream, Args&&... args) {
  launch_pdl_cluster(name, kernel, grid, block, smem, 0, stream, std::forward<Args>(args)...);
}

// Lets kKernel be launched with up to `bytes` of dynamic shared memory (past 48 KB a kernel
// must opt in), once per kernel, device and process: the attribute belongs to the device's
// context, so a second GPU needs its own call. Pass the most any launch of kKernel uses.
template <auto kKernel>
void allow_dynamic_smem(int bytes) {
  constexpr int kMaxDevices = 64;
  static std::once_flag done[kMaxDevices];
  int device = 0;
  KS_CUDA_CHECK(cudaGetDevice(&device));
  KS_CUDA_CHECK(device < kMaxDevices ? cudaSuccess : cudaErrorInvalidDevice);
  std::call_once(done[device], [bytes] {
    KS_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  });
}

}  // namespace kestrel::kernels
