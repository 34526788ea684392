// Tensor: a typed, shaped view of memory on some device, optionally owning it.
//
// A Tensor is cheap to copy: copies share the storage. Views made by slicing keep the
// storage alive. Tensors are always contiguous, row-major.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "core/dtype.h"

namespace kestrel {

enum class Device : uint8_t { kCpu, kCuda };

class Shape {
 public:
  static constexpr int kMaxDims = 4;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);

  int ndim() const { return ndim_; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  int64_t numel() const;
  bool operator==(const Shape& o) const;
  std::string str() const;  // "[2, 3]"

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int ndim_ = 0;
};

class Tensor {
 public:
  Tensor() = default;
  // A view of memory the caller keeps alive.
  Tensor(void* data, DType dtype, Shape shape, Device device = Device::kCpu);
  // A tensor that owns `storage` (any deleter).
  Tensor(std::shared_ptr<void> storage, void* data, DType dtype, Shape shape, Device device);

  // Allocates zero-initialised host memory.
  static Tensor host(DType dtype, Shape shape);

  bool defined() const { return data_ != nullptr; }
  void* data() const { return data_; }
  template <typename T>
  T* data_as() const { return static_cast<T*>(data_); }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i]; }
  int ndim() const { return shape_.ndim(); }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  Device device() const { return device_; }

  // Rows [begin, end) of the first dimension, sharing storage.
  Tensor slice(int64_t begin, int64_t end) const;
  // Same memory, another shape with the same number of elements.
  Tensor view(Shape shape) const;

 private:
  std::shared_ptr<void> storage_;
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Shape shape_;
  Device device_ = Device::kCpu;
};

// Physical memory of this machine in bytes: what a check that a large host allocation can
// fit compares against (Linux overcommits, so the allocation itself would not fail).
double host_memory_bytes();

}  // namespace kestrel
