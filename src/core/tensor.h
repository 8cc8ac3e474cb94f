#pragma once
// Tensor: a typed, contiguous, row-major block of memory with a shape (at most 6 dims) on a device.
// A tensor either owns its storage (shared, reference-counted) or borrows memory (from an Arena, a
// flat parameter buffer or a memory-mapped file). Views and slices never copy and never touch the
// heap, so the training step can build them freely.
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "core/error.h"

namespace megadlm {

enum class Device : uint8_t { CPU, CUDA };
const char* device_name(Device d);
// "cpu" or "cuda"; anything else is an Error that names `flag` (e.g. "--device").
Device device_from_name(const std::string& name, const char* flag);

// A shape of up to kMaxDims dimensions, stored inline (no heap).
struct Shape {
  static constexpr int kMaxDims = 6;
  int64_t d[kMaxDims] = {0, 0, 0, 0, 0, 0};
  int n = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  int64_t numel() const;
  int64_t operator[](int i) const { return d[i]; }
  int64_t& operator[](int i) { return d[i]; }
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string str() const;  // "[2, 3, 4]"
};

class Tensor {
 public:
  Tensor() = default;

  // Allocates owned, 64-byte aligned storage (uninitialised / zeroed); a non-CPU device allocates
  // through the table its backend registered (core/device_memory.h).
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::CPU);
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::CPU);
  // Borrows memory owned elsewhere; the caller keeps it alive.
  static Tensor borrow(void* data, const Shape& shape, DType dtype, Device device = Device::CPU);

  bool defined() const { return data_ != nullptr || shape_.numel() == 0; }
  const Shape& shape() const { return shape_; }
  int dim() const { return shape_.n; }
  int64_t size(int i) const;  // negative i counts from the end
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }

  void* raw() const { return data_; }
  template <typename T>
  T* data() const {
    check_type(sizeof(T));
    return static_cast<T*>(data_);
  }

  // Same memory, new shape with the same number of elements. One dimension may be -1.
  Tensor view(const Shape& shape) const;
  // Rows [begin, end) of dimension 0.
  Tensor slice(int64_t begin, int64_t end) const;
  // Row i of dimension 0, with that dimension dropped.
  Tensor operator[](int64_t i) const;

  Tensor clone() const;
  // Same shape and dtype; any pair of devices with at most one non-CPU one (upload / download).
  void copy_from(const Tensor& src);
  void zero_();                       // any device
  void fill_(float value);            // F32, CPU only

 private:
  void check_type(size_t elem_size) const;
  std::shared_ptr<void> owner_;  // null when borrowed
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::F32;
  Device device_ = Device::CPU;
};

}  // namespace megadlm
