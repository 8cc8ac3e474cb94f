#include "core/tensor.h"

#include "core/device_memory.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace megadlm {

const char* device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

Device device_from_name(const std::string& name, const char* flag) {
  MEGADLM_CHECK(name == "cpu" || name == "cuda", flag, ": unknown value '", name, "' (expected cpu or cuda)");
  return name == "cuda" ? Device::CUDA : Device::CPU;
}

Shape::Shape(std::initializer_list<int64_t> dims) {
  MEGADLM_CHECK(dims.size() <= static_cast<size_t>(kMaxDims), "tensor rank ", dims.size(),
                " exceeds the maximum of ", kMaxDims);
  for (int64_t v : dims) d[n++] = v;
}

int64_t Shape::numel() const {
  int64_t p = 1;
  for (int i = 0; i < n; ++i) p *= d[i];
  return p;
}

bool Shape::operator==(const Shape& o) const {
  if (n != o.n) return false;
  for (int i = 0; i < n; ++i)
    if (d[i] != o.d[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < n; ++i) os << (i ? ", " : "") << d[i];
  os << ']';
  return os.str();
}

static void check_shape(const Shape& s) {
  for (int i = 0; i < s.n; ++i) MEGADLM_CHECK(s.d[i] >= 0, "negative dimension in shape ", s.str());
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  check_shape(shape);
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  const size_t bytes = (t.nbytes() + 63) / 64 * 64;
  if (bytes > 0) {
    if (device == Device::CPU) {
      void* p = host_alloc_aligned(bytes);
      MEGADLM_CHECK(p != nullptr, "out of memory allocating ", bytes, " bytes for a tensor of shape ",
                    shape.str());
      t.owner_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
      t.data_ = p;
    } else {
      // Device memory through the table its backend registered (core/device_memory.h).
      const DeviceMemory& m = device_memory(device);
      void* p = m.alloc(bytes);
      t.owner_ = std::shared_ptr<void>(p, m.free);
      t.data_ = p;
    }
  }
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero_();
  return t;
}

Tensor Tensor::borrow(void* data, const Shape& shape, DType dtype, Device device) {
  check_shape(shape);
  Tensor t;
  t.data_ = data;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

int64_t Tensor::size(int i) const {
  const int j = i < 0 ? i + shape_.n : i;
  MEGADLM_CHECK(j >= 0 && j < shape_.n, "dimension ", i, " out of range for shape ", shape_.str());
  return shape_.d[j];
}

void Tensor::check_type(size_t elem_size) const {
  MEGADLM_CHECK(elem_size == dtype_size(dtype_), "tensor of dtype ", dtype_name(dtype_),
                " accessed with an element of ", elem_size, " bytes");
}

Tensor Tensor::view(const Shape& shape) const {
  Shape s = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < s.n; ++i) {
    if (s.d[i] == -1) {
      MEGADLM_CHECK(infer < 0, "view shape ", shape.str(), " has more than one -1");
      infer = i;
    } else {
      known *= s.d[i];
    }
  }
  if (infer >= 0) {
    MEGADLM_CHECK(known > 0 && numel() % known == 0, "cannot view ", shape_.str(), " as ", shape.str());
    s.d[infer] = numel() / known;
  }
  MEGADLM_CHECK(s.numel() == numel(), "cannot view ", shape_.str(), " as ", shape.str());
  Tensor t = *this;
  t.shape_ = s;
  return t;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  MEGADLM_CHECK(shape_.n >= 1, "slice of a 0-d tensor");
  MEGADLM_CHECK(0 <= begin && begin <= end && end <= shape_.d[0], "slice [", begin, ", ", end,
                ") out of range for shape ", shape_.str());
  const int64_t row = shape_.n > 1 ? numel() / shape_.d[0] : 1;
  Tensor t = *this;
  t.shape_.d[0] = end - begin;
  t.data_ = static_cast<char*>(data_) + begin * row * dtype_size(dtype_);
  return t;
}

Tensor Tensor::operator[](int64_t i) const {
  Tensor t = slice(i, i + 1);
  for (int k = 0; k + 1 < t.shape_.n; ++k) t.shape_.d[k] = t.shape_.d[k + 1];
  t.shape_.n -= 1;
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device_);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  MEGADLM_CHECK(src.shape_ == shape_ && src.dtype_ == dtype_, "copy_from: ", src.shape_.str(), " ",
                dtype_name(src.dtype_), " into ", shape_.str(), " ", dtype_name(dtype_));
  if (device_ == Device::CPU && src.device_ == Device::CPU) {
    if (nbytes()) std::memcpy(data_, src.data_, nbytes());
    return;
  }
  copy_bytes(data_, device_, src.data_, src.device_, nbytes());  // upload, download or on the device
}

void Tensor::zero_() {
  if (device_ != Device::CPU) {
    if (nbytes()) device_memory(device_).zero(data_, nbytes());
    return;
  }
  // Large buffers (the gradients, zeroed every step) are split across the OpenMP threads: one thread's
  // stores do not saturate the memory bus, and the others would wait.
  constexpr size_t kChunk = size_t{1} << 21;
  const size_t n = nbytes(), chunks = (n + kChunk - 1) / kChunk;
  auto* p = static_cast<char*>(data_);
#pragma omp parallel for schedule(static) if (chunks >= 4)
  for (size_t c = 0; c < chunks; ++c) std::memset(p + c * kChunk, 0, std::min(kChunk, n - c * kChunk));
}

void Tensor::fill_(float value) {
  MEGADLM_CHECK(device_ == Device::CPU, "fill_: CPU tensors only");
  float* p = data<float>();
  for (int64_t i = 0; i < numel(); ++i) p[i] = value;
}

}  // namespace megadlm
