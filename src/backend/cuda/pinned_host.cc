#include "backend/cuda/pinned_host.h"

#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace kestrel {

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) cudaFreeHost(data_);
}

uint8_t* PinnedBuffer::get(size_t bytes) {
  if (bytes > capacity_) {
    if (data_ != nullptr) KS_CUDA_CHECK(cudaFreeHost(data_));
    data_ = nullptr;
    const size_t grown = std::max(bytes, 2 * capacity_);
    capacity_ = 0;
    KS_CUDA_CHECK(cudaHostAlloc(&data_, grown, mapped_ ? cudaHostAllocMapped : cudaHostAllocDefault));
    capacity_ = grown;
  }
  return static_cast<uint8_t*>(data_);
}

uint8_t* PinnedBuffer::device_ptr() const {
  KS_ASSERT(mapped_ && data_ != nullptr, "device_ptr() of an unmapped or empty pinned buffer");
  void* p = nullptr;
  KS_CUDA_CHECK(cudaHostGetDevicePointer(&p, data_, 0));
  return static_cast<uint8_t*>(p);
}

StreamMark::StreamMark() {
  KS_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
}

StreamMark::~StreamMark() {
  // Errors are ignored: at process exit the runtime may already be unloading.
  cudaEventSynchronize(event_);
  cudaEventDestroy(event_);
}

void StreamMark::record(cudaStream_t stream) { KS_CUDA_CHECK(cudaEventRecord(event_, stream)); }

void StreamMark::wait() const { KS_CUDA_CHECK(cudaEventSynchronize(event_)); }

void UploadRing::copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  const int slot = next_;
  next_ = (next_ + 1) % kSlots;
  done_[slot].wait();
  uint8_t* staged = buffers_[slot].get(bytes);
  std::memcpy(staged, src, bytes);
  KS_CUDA_CHECK(cudaMemcpyAsync(dst, staged, bytes, cudaMemcpyHostToDevice, stream));
  done_[slot].record(stream);
}

}  // namespace kestrel
