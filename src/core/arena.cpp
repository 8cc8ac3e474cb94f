#include "core/arena.h"

#include <cstdlib>

#include "core/device_memory.h"
#include "core/error.h"

namespace megadlm {

static size_t round_up64(size_t n) { return (n + 63) / 64 * 64; }

// Host blocks from host_alloc_aligned (null on failure: the callers name the arena's need), other devices
// through their registered table.
void* Arena::raw_alloc(size_t bytes) const {
  if (device_ == Device::CPU) return host_alloc_aligned(bytes);
  return device_memory(device_).alloc(bytes);
}

void Arena::raw_free(void* p) const {
  if (device_ == Device::CPU) std::free(p);
  else device_memory(device_).free(p);
}

void Arena::set_device(Device device) {
  MEGADLM_CHECK(used_ == 0, "Arena::set_device on an arena in use");
  if (device == device_) return;
  for (void* p : overflow_) raw_free(p);
  overflow_.clear();
  overflow_at_.clear();
  raw_free(block_);
  block_ = nullptr;
  device_ = device;
  if (capacity_) {
    block_ = static_cast<char*>(raw_alloc(capacity_));
    MEGADLM_CHECK(block_ != nullptr, "out of memory reserving an activation arena of ", capacity_, " bytes");
  }
}

Arena::Arena(size_t initial_bytes, Device device) : device_(device) {
  if (initial_bytes) {
    capacity_ = round_up64(initial_bytes);
    block_ = static_cast<char*>(raw_alloc(capacity_));
    MEGADLM_CHECK(block_ != nullptr, "out of memory reserving an activation arena of ", capacity_, " bytes");
    ++heap_allocations_;
  }
}

Arena::~Arena() {
  for (void* p : overflow_) raw_free(p);
  raw_free(block_);
}

void* Arena::allocate(size_t bytes) {
  bytes = round_up64(bytes == 0 ? 64 : bytes);
  if (overflow_.empty() && used_ + bytes <= capacity_) {
    void* p = block_ + used_;
    used_ += bytes;
    if (used_ > high_water_) high_water_ = used_;
    return p;
  }
  // Overflow: serve from the heap this time; reset() will grow the block to fit.
  void* p = raw_alloc(bytes);
  MEGADLM_CHECK(p != nullptr, "out of memory: the activation arena needs ", used_ + bytes, " bytes");
  ++heap_allocations_;
  overflow_.push_back(p);
  overflow_at_.push_back(used_);
  used_ += bytes;
  if (used_ > high_water_) high_water_ = used_;
  return p;
}

Tensor Arena::tensor(const Shape& shape, DType dtype) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  return Tensor::borrow(allocate(bytes), shape, dtype, device_);
}

Tensor Arena::zeros(const Shape& shape, DType dtype) {
  Tensor t = tensor(shape, dtype);
  t.zero_();
  return t;
}

void Arena::reset() {
  // Regrow whenever the step went beyond the block, also when its overflow chunks were all handed out
  // after a mark and already freed by release() (a temporary that overflowed inside a nested region).
  if (!overflow_.empty() || high_water_ > capacity_) {
    for (void* p : overflow_) raw_free(p);
    overflow_.clear();
    overflow_at_.clear();
    raw_free(block_);
    capacity_ = round_up64(high_water_ + high_water_ / 4);
    block_ = static_cast<char*>(raw_alloc(capacity_));
    MEGADLM_CHECK(block_ != nullptr, "out of memory growing the activation arena to ", capacity_, " bytes");
    ++heap_allocations_;
  }
  used_ = 0;
}

void Arena::release(size_t mark) {
  MEGADLM_CHECK(mark <= used_, "Arena::release to a mark beyond the used size");
  if (mark == 0) {
    reset();  // everything is free: regrow now, so that an arena used only through marks settles too
    return;
  }
  // The count follows the mark (later allocations take new chunks until reset()), so high_water_, and
  // the block reset() regrows to, is the live peak rather than the sum of everything allocated in the
  // step. Overflow chunks handed out after the mark are freed now, so that the first step's resident
  // memory is that live peak too, not the sum of every temporary (the [N,V] logits, for instance).
  while (!overflow_at_.empty() && overflow_at_.back() >= mark) {
    raw_free(overflow_.back());
    overflow_.pop_back();
    overflow_at_.pop_back();
  }
  used_ = mark;
}

}  // namespace megadlm
