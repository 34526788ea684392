// CudaBackend construction, memory and transfers. The ops are in cuda_ops.cc and
// cuda_attention_ops.cc.
#include "backend/cuda/cuda_backend.h"

#include <cuda_profiler_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pinned_host.h"
#include "core/error.h"
#include "core/logging.h"

namespace kestrel {
namespace {

bool is_float(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

}  // namespace

int cuda_device_count() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear it: "no driver" is an answer here, not a failure
    return 0;
  }
  return n;
}

bool cuda_device_available() { return cuda_device_count() > 0; }

std::unique_ptr<Backend> make_cuda_backend(int device_index, CudaKvLayout kv_layout) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw_error("CUDA backend: no usable CUDA device ({})", cudaGetErrorString(err));
  }
  KS_CHECK(device_index >= 0 && device_index < n,
           "CUDA backend: device index {} out of range ({} device(s))", device_index, n);
  return std::make_unique<CudaBackend>(device_index, kv_layout);
}

CudaStreamHolder::CudaStreamHolder(int dev) : device(dev) {
  KS_CUDA_CHECK(cudaSetDevice(dev));
  KS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
}

CudaStreamHolder::~CudaStreamHolder() {
  // Errors are ignored: at process exit the runtime may already be unloading.
  cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
}

namespace {

const char* layout_name(CudaKvLayout layout) {
  switch (layout) {
    case CudaKvLayout::kTokenMajor: return "token-major";
    case CudaKvLayout::kHeadMajor: return "head-major";
    case CudaKvLayout::kAuto: break;
  }
  return "auto";
}

// kAuto, unless KESTREL_KV_LAYOUT forces one; an explicit layout stays.
CudaKvLayout requested_layout(CudaKvLayout layout) {
  const char* env = std::getenv("KESTREL_KV_LAYOUT");
  if (layout != CudaKvLayout::kAuto || env == nullptr) return layout;
  const std::string v = env;
  if (v == "token") return CudaKvLayout::kTokenMajor;
  if (v == "head") return CudaKvLayout::kHeadMajor;
  if (v != "auto") throw_error("KESTREL_KV_LAYOUT={}: expected token, head or auto", v);
  return layout;
}

}  // namespace

CudaBackend::CudaBackend(int device_index, CudaKvLayout kv_layout)
    : holder_(std::make_shared<CudaStreamHolder>(device_index)),
      requested_layout_(requested_layout(kv_layout)),
      kv_layout_(requested_layout_ == CudaKvLayout::kAuto ? CudaKvLayout::kTokenMajor
                                                          : requested_layout_) {
  // Keep freed pool memory for reuse: tensors are allocated and freed every step.
  cudaMemPool_t pool;
  KS_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_index));
  uint64_t threshold = std::numeric_limits<uint64_t>::max();
  KS_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  gemm_ = std::make_unique<GemmRunner>(holder_->stream);
  uploads_ = std::make_shared<UploadRing>();
  cudaDeviceProp prop{};
  KS_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_index));
  num_sms_ = prop.multiProcessorCount;
  name_ = fmt::format("cuda:{} ({}, sm_{}{}, {} SMs, {:.1f} GiB, {} KV pages)", device_index,
                      prop.name, prop.major, prop.minor, prop.multiProcessorCount,
                      prop.totalGlobalMem / double(1ull << 30), layout_name(requested_layout_));
  KS_LOG_INFO("CUDA backend on {}", name_);
  split_counters_ = empty(DType::kI32, Shape{kernels::kMaxSplitCounters});
  KS_CUDA_CHECK(cudaMemsetAsync(split_counters_.data(), 0, split_counters_.nbytes(), stream()));
}

Tensor CudaBackend::empty(DType dtype, Shape shape) {
  KS_CHECK(shape.numel() >= 0, "CUDA backend: empty() with negative shape {}", shape.str());
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  void* p = nullptr;
  // At least 256 bytes, so an empty tensor still has an address ("defined").
  KS_CUDA_CHECK(cudaMallocAsync(&p, bytes < 256 ? 256 : bytes, holder_->stream));
  std::shared_ptr<CudaStreamHolder> holder = holder_;
  std::shared_ptr<void> storage(p, [holder](void* q) { cudaFreeAsync(q, holder->stream); });
  return Tensor(std::move(storage), p, dtype, shape, Device::kCuda);
}

Tensor CudaBackend::upload(const Tensor& host, DType dtype) {
  KS_CHECK(host.defined() && host.device() == Device::kCpu,
           "CUDA backend: upload() needs a defined host tensor");
  Tensor out = empty(dtype, host.shape());
  if (host.numel() == 0) return out;
  const void* src = host.data();
  std::vector<uint8_t> converted;
  if (host.dtype() != dtype) {
    KS_CHECK(is_float(host.dtype()) && is_float(dtype),
             "CUDA backend: upload() cannot convert {} to {} (only between float types)",
             dtype_name(host.dtype()), dtype_name(dtype));
    const size_t n = static_cast<size_t>(host.numel());
    std::vector<float> f32(n);
    convert_to_f32(host.data(), host.dtype(), f32.data(), n);
    converted.resize(n * dtype_size(dtype));
    convert_from_f32(f32.data(), converted.data(), dtype, n);
    src = converted.data();
  }
  // From pageable memory the call returns once the source is staged, so `converted` may go.
  KS_CUDA_CHECK(cudaMemcpyAsync(out.data(), src, out.nbytes(), cudaMemcpyHostToDevice,
                                holder_->stream));
  return out;
}

Tensor CudaBackend::to_host(const Tensor& t) {
  KS_CHECK(t.defined() && t.device() == Device::kCuda,
           "CUDA backend: to_host() needs a defined CUDA tensor");
  Tensor out = Tensor::host(t.dtype(), t.shape());
  if (t.numel() == 0) return out;
  KS_CUDA_CHECK(cudaMemcpyAsync(out.data(), t.data(), t.nbytes(), cudaMemcpyDeviceToHost,
                                holder_->stream));
  KS_CUDA_CHECK(cudaStreamSynchronize(holder_->stream));
  return out;
}

std::vector<LayerKvCache> CudaBackend::allocate_kv_cache(const KvCacheSpec& spec) {
  spec.check("CUDA", DType::kBF16);
  if (requested_layout_ == CudaKvLayout::kAuto && !layout_settled_) {
    kv_layout_ = spec.dtype == DType::kF8E4M3 ? CudaKvLayout::kHeadMajor : CudaKvLayout::kTokenMajor;
  }
  layout_settled_ = true;  // caches allocated earlier keep the layout they were made with
  const size_t total = spec.bytes_per_block() * static_cast<size_t>(spec.num_blocks);
  void* p = nullptr;
  // One plain allocation, outside the pool: it lives as long as the engine.
  KS_CUDA_CHECK(cudaMalloc(&p, total));
  std::shared_ptr<void> storage(p, [](void* q) { cudaFree(q); });
  const Shape shape = kv_layout_ == CudaKvLayout::kHeadMajor
                          ? Shape{spec.num_blocks, spec.num_kv_heads, spec.block_size, spec.head_dim}
                          : Shape{spec.num_blocks, spec.block_size, spec.num_kv_heads, spec.head_dim};
  const size_t per_tensor = total / (2 * static_cast<size_t>(spec.num_layers));
  const bool fp8 = spec.dtype == DType::kF8E4M3;
  const Shape quant_shape{2, spec.num_kv_heads};
  Tensor ones = Tensor::host(DType::kF32, quant_shape);
  for (int64_t i = 0; i < ones.numel(); ++i) static_cast<float*>(ones.data())[i] = 1.0f;
  std::vector<LayerKvCache> layers;
  layers.reserve(spec.num_layers);
  auto* base = static_cast<char*>(p);
  for (int i = 0; i < spec.num_layers; ++i) {
    LayerKvCache kv;
    kv.k = Tensor(storage, base + (2 * i) * per_tensor, spec.dtype, shape, Device::kCuda);
    kv.v = Tensor(storage, base + (2 * i + 1) * per_tensor, spec.dtype, shape, Device::kCuda);
    if (fp8) {
      kv.scale = upload(ones, DType::kF32);
      kv.amax = empty(DType::kF32, quant_shape);
      kv.clamped = empty(DType::kI64, quant_shape);
      KS_CUDA_CHECK(cudaMemsetAsync(kv.amax.data(), 0, kv.amax.nbytes(), holder_->stream));
      KS_CUDA_CHECK(cudaMemsetAsync(kv.clamped.data(), 0, kv.clamped.nbytes(), holder_->stream));
    }
    layers.push_back(std::move(kv));
  }
  return layers;
}

void* CudaBackend::scratch(size_t bytes) {
  if (!scratch_.defined() || scratch_.nbytes() < bytes) {
    if (scratch_.defined()) retired_scratch_.push_back(scratch_);
    // Doubling bounds the number of retired buffers (and so the memory they keep).
    const size_t grown = scratch_.defined() ? std::max(bytes, 2 * scratch_.nbytes()) : bytes;
    scratch_ = empty(DType::kU8, Shape{static_cast<int64_t>(grown)});
  }
  return scratch_.data();
}

void CudaBackend::synchronize() { KS_CUDA_CHECK(cudaStreamSynchronize(holder_->stream)); }

void CudaBackend::set_profiler_capture(bool on) {
  synchronize();  // the capture covers whole steps: nothing of the previous one in flight
  KS_CUDA_CHECK(on ? cudaProfilerStart() : cudaProfilerStop());
}

}  // namespace kestrel
