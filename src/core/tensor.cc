#include "core/tensor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"

namespace kestrel {

Shape::Shape(std::initializer_list<int64_t> dims) {
  KS_ASSERT(dims.size() <= kMaxDims, "too many dimensions: {}", dims.size());
  for (int64_t d : dims) dims_[ndim_++] = d;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= dims_[i];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (ndim_ != o.ndim_) return false;
  for (int i = 0; i < ndim_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < ndim_; ++i) s += fmt::format("{}{}", i ? ", " : "", dims_[i]);
  return s + "]";
}

Tensor::Tensor(void* data, DType dtype, Shape shape, Device device)
    : data_(data), dtype_(dtype), shape_(shape), device_(device) {}

Tensor::Tensor(std::shared_ptr<void> storage, void* data, DType dtype, Shape shape, Device device)
    : storage_(std::move(storage)), data_(data), dtype_(dtype), shape_(shape), device_(device) {}

Tensor Tensor::host(DType dtype, Shape shape) {
  size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  if (bytes >= (size_t{1} << 20)) {
    // Large buffers (KV cache, weights) come from the kernel already zeroed, page by page on
    // first touch, instead of being written once here.
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw_error("out of host memory allocating {} bytes", bytes);
    std::shared_ptr<void> storage(p, [bytes](void* q) { munmap(q, bytes); });
    return Tensor(std::move(storage), p, dtype, shape, Device::kCpu);
  }
  // 64-byte alignment for vector loads; at least one byte so empty tensors are still "defined".
  size_t alloc = (bytes + 63) / 64 * 64 + 64;
  void* p = std::aligned_alloc(64, alloc);
  if (p == nullptr) throw_error("out of host memory allocating {} bytes", bytes);
  std::memset(p, 0, alloc);
  std::shared_ptr<void> storage(p, [](void* q) { std::free(q); });
  return Tensor(std::move(storage), p, dtype, shape, Device::kCpu);
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  KS_ASSERT(ndim() >= 1 && 0 <= begin && begin <= end && end <= dim(0), "bad slice [{}, {}) of {}",
            begin, end, shape_.str());
  Shape s = shape_;
  s[0] = end - begin;
  size_t row_bytes = dim(0) == 0 ? 0 : nbytes() / static_cast<size_t>(dim(0));
  return Tensor(storage_, static_cast<char*>(data_) + begin * row_bytes, dtype_, s, device_);
}

Tensor Tensor::view(Shape shape) const {
  KS_ASSERT(shape.numel() == numel(), "view {} of {}", shape.str(), shape_.str());
  return Tensor(storage_, data_, dtype_, shape, device_);
}

double host_memory_bytes() {
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

}  // namespace kestrel
