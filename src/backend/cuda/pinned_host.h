// Page-locked host memory for the backend's copies: PinnedBuffer (grows, for one use at a
// time), StreamMark (when enqueued work is done with it) and UploadRing (host-to-device
// copies whose source the caller may reuse at once).
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>

namespace kestrel {

// Page-locked host memory that grows, so the copies are asynchronous and fast. Growing
// frees the old buffer: only when no copy or kernel still uses it. It grows at least
// twofold, because cudaFreeHost waits for the whole device and cudaHostAlloc takes
// milliseconds: a buffer resized to each step's exact size (a penalised batch's entries grow
// every step) stalled every step behind the one in flight. Mapped: kernels can write it
// directly, through device_ptr() (no copy back).
class PinnedBuffer {
 public:
  explicit PinnedBuffer(bool mapped = false) : mapped_(mapped) {}
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();
  uint8_t* get(size_t bytes);
  // The device's address of get()'s memory. REQUIRES: mapped.
  uint8_t* device_ptr() const;

 private:
  const bool mapped_;
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

// A point in a stream, for reusing host memory that work enqueued before it still uses
// (a copy's source, a kernel's mapped output): record() after the work, wait() before the
// reuse. wait() returns at once before the first record(); the destructor waits too.
class StreamMark {
 public:
  StreamMark();
  StreamMark(const StreamMark&) = delete;
  StreamMark& operator=(const StreamMark&) = delete;
  ~StreamMark();
  void record(cudaStream_t stream);
  void wait() const;

 private:
  cudaEvent_t event_ = nullptr;
};

// Host-to-device copies from pageable memory without the driver's staging, which may wait
// for the stream to drain (CUDA's API synchronization rules): the bytes go into the next of
// kSlots pinned buffers, which is copied asynchronously. A slot is reused once the copy
// issued from it kSlots copies ago is done (an event; normally long done), so the caller
// may reuse its own memory as soon as copy() returns and the stream never has to drain.
class UploadRing {
 public:
  static constexpr int kSlots = 4;
  UploadRing() = default;
  UploadRing(const UploadRing&) = delete;
  UploadRing& operator=(const UploadRing&) = delete;
  void copy(void* dst, const void* src, size_t bytes, cudaStream_t stream);

 private:
  std::array<PinnedBuffer, kSlots> buffers_;
  std::array<StreamMark, kSlots> done_;  // after each slot's copy
  int next_ = 0;
};

}  // namespace kestrel
