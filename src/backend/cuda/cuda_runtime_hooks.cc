// CudaBackend's memory, copy and graph hooks (the runtime's side of the backend: KV cache
// sizing, fixed input buffers refilled each step, CUDA graphs, the benchmark's ceiling).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/graph_edges.h"
#include "backend/cuda/pinned_host.h"
#include "core/error.h"

namespace kestrel {
namespace {

// An instantiated graph, replayed on the backend's stream. Holds the stream alive.
class CudaGraph final : public Graph {
 public:
  CudaGraph(cudaGraphExec_t exec, std::shared_ptr<CudaStreamHolder> holder)
      : exec_(exec), holder_(std::move(holder)) {}
  ~CudaGraph() override { cudaGraphExecDestroy(exec_); }
  void replay() override { KS_CUDA_CHECK(cudaGraphLaunch(exec_, holder_->stream)); }

 private:
  cudaGraphExec_t exec_;
  std::shared_ptr<CudaStreamHolder> holder_;
};

cudaMemPool_t default_pool(int device) {
  cudaMemPool_t pool;
  KS_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  return pool;
}

}  // namespace

MemoryInfo CudaBackend::memory_info() {
  MemoryInfo info;
  KS_CUDA_CHECK(cudaMemGetInfo(&info.free, &info.total));
  // The pool behind empty() is the device's default pool: its high watermark counts every
  // stream-ordered allocation of this process on the device (the KV cache, a plain
  // cudaMalloc, is not in it).
  uint64_t high = 0;
  KS_CUDA_CHECK(cudaMemPoolGetAttribute(default_pool(holder_->device), cudaMemPoolAttrUsedMemHigh,
                                        &high));
  info.peak_bytes = static_cast<size_t>(high);
  return info;
}

// Also gives the pool's unused memory back to the driver: the pool keeps freed memory for
// reuse (see the constructor), which would otherwise hide from the free memory reported next
// (memory of tensors freed earlier in the process). A measurement that starts here then sees
// in the drop of free memory exactly what it allocated, peaks included, as the pool keeps
// them from then on.
void CudaBackend::reset_peak_memory() {
  KS_CUDA_CHECK(cudaStreamSynchronize(holder_->stream));
  cudaMemPool_t pool = default_pool(holder_->device);
  KS_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
  uint64_t zero = 0;  // the only value the attribute can be reset to
  KS_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
}

void CudaBackend::copy_from_host(const Tensor& host, Tensor& dst) {
  KS_CHECK(host.defined() && host.device() == Device::kCpu,
           "CUDA backend: copy_from_host needs a defined host tensor");
  KS_CHECK(dst.defined() && dst.device() == Device::kCuda,
           "CUDA backend: copy_from_host needs a defined CUDA destination");
  KS_CHECK(host.nbytes() == dst.nbytes(), "CUDA backend: copy_from_host of {} bytes into {}",
           host.nbytes(), dst.nbytes());
  if (host.nbytes() == 0) return;
  // Staged in pinned memory by us, not the driver (which may wait for the stream first):
  // a step can be uploaded while the one before still runs (the engine's overlap).
  uploads_->copy(dst.data(), host.data(), host.nbytes(), holder_->stream);
}

void CudaBackend::copy_to_host(const Tensor& src, Tensor& host) {
  KS_CHECK(src.defined() && src.device() == Device::kCuda,
           "CUDA backend: copy_to_host needs a defined CUDA tensor");
  KS_CHECK(host.defined() && host.device() == Device::kCpu,
           "CUDA backend: copy_to_host needs a defined host destination");
  KS_CHECK(host.nbytes() == src.nbytes(), "CUDA backend: copy_to_host of {} bytes into {}",
           src.nbytes(), host.nbytes());
  if (src.nbytes() == 0) return;
  KS_CUDA_CHECK(cudaMemcpyAsync(host.data(), src.data(), src.nbytes(), cudaMemcpyDeviceToHost,
                                holder_->stream));
  KS_CUDA_CHECK(cudaStreamSynchronize(holder_->stream));
}

namespace {

// Fills `bytes` of device memory with pseudo-random bytes (never a constant, which a memory
// system could treat differently): 1 MiB made on the host, doubled on the device.
void fill_pseudo_random(void* dst, size_t bytes, cudaStream_t s) {
  std::vector<uint64_t> host(std::min<size_t>(bytes, size_t(1) << 20) / 8 + 1);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (uint64_t& v : host) {  // xorshift64
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v = x;
  }
  auto* d = static_cast<char*>(dst);
  size_t filled = std::min(bytes, host.size() * 8);
  KS_CUDA_CHECK(cudaMemcpyAsync(d, host.data(), filled, cudaMemcpyHostToDevice, s));
  while (filled < bytes) {
    const size_t n = std::min(filled, bytes - filled);
    KS_CUDA_CHECK(cudaMemcpyAsync(d + filled, d, n, cudaMemcpyDeviceToDevice, s));
    filled += n;
  }
  KS_CUDA_CHECK(cudaStreamSynchronize(s));  // `host` goes out of scope
}

}  // namespace

double CudaBackend::measure_copy_bandwidth(size_t bytes) {
  KS_CHECK(bytes >= 16, "measure_copy_bandwidth: {} bytes is too small", bytes);
  cudaStream_t s = holder_->stream;
  KS_CUDA_CHECK(cudaStreamSynchronize(s));
  // Plain allocations, given back at once: the pool would keep them from the KV cache.
  void* src = nullptr;
  void* dst = nullptr;
  if (cudaMalloc(&src, bytes) != cudaSuccess || cudaMalloc(&dst, bytes) != cudaSuccess) {
    cudaGetLastError();
    if (src) cudaFree(src);
    return 0.0;  // not enough free memory left to measure
  }
  // Each timing covers kBatch copies back to back: the sustained rate, without the ramp of
  // a lone copy (a lone 1 GiB copy measured ~11% slower on an H200).
  constexpr int kWarmup = 3, kReps = 7, kBatch = 5;
  std::vector<float> ms(kReps);
  cudaEvent_t start, stop;
  KS_CUDA_CHECK(cudaEventCreate(&start));
  KS_CUDA_CHECK(cudaEventCreate(&stop));
  fill_pseudo_random(src, bytes, s);
  for (int i = 0; i < kWarmup; ++i) {
    KS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
  }
  for (int i = 0; i < kReps; ++i) {
    KS_CUDA_CHECK(cudaEventRecord(start, s));
    for (int j = 0; j < kBatch; ++j) {
      KS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
    }
    KS_CUDA_CHECK(cudaEventRecord(stop, s));
    KS_CUDA_CHECK(cudaEventSynchronize(stop));
    KS_CUDA_CHECK(cudaEventElapsedTime(&ms[i], start, stop));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(src);
  cudaFree(dst);
  std::sort(ms.begin(), ms.end());
  const double seconds = ms[kReps / 2] * 1e-3 / kBatch;
  return seconds > 0 ? 2.0 * static_cast<double>(bytes) / seconds : 0.0;
}

std::unique_ptr<Graph> CudaBackend::capture_graph(const std::function<void()>& record) {
  cudaStream_t s = holder_->stream;
  KS_CUDA_CHECK(cudaStreamSynchronize(s));
  KS_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  try {
    record();
  } catch (...) {
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(s, &broken);  // leave the stream usable
    if (broken != nullptr) cudaGraphDestroy(broken);
    cudaGetLastError();
    throw;
  }
  cudaGraph_t graph = nullptr;
  KS_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  try {
    inspect_captured_graph(graph);
  } catch (...) {
    cudaGraphDestroy(graph);
    throw;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  KS_CUDA_CHECK(err);
  return std::make_unique<CudaGraph>(exec, holder_);
}

}  // namespace kestrel
