#pragma once
// Arena: a bump allocator for activations. A training step allocates its temporaries from the arena
// and calls reset() when done. If a step needs more than the arena holds, the overflow is served from
// extra chunks and, at the next reset(), the arena is regrown into one block of the high-water size plus
// a quarter. After the first step the steady state therefore makes no heap allocation at all, also when
// the steps' sizes vary a little (a diffusion step's masked rows): without the headroom each new maximum
// would free and re-map the whole block, and every page of it would fault again. The headroom costs no
// memory until it is used (a large block is mapped lazily by the kernel).
// An arena lives on one device: a CUDA arena takes its block and overflow chunks from the device's
// allocator (core/device_memory.h), and the tensors it hands out carry that device.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace megadlm {

class Arena {
 public:
  explicit Arena(size_t initial_bytes = 0, Device device = Device::CPU);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  void* allocate(size_t bytes);  // 64-byte aligned, uninitialised
  Tensor tensor(const Shape& shape, DType dtype = DType::F32);
  Tensor zeros(const Shape& shape, DType dtype = DType::F32);

  // Frees everything allocated since construction (or the last reset).
  void reset();
  // A mark to free back to: everything allocated after mark() is released by release(mark).
  // release(0) is reset().
  size_t mark() const { return used_; }
  void release(size_t mark);

  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  size_t high_water() const { return high_water_; }
  size_t heap_allocations() const { return heap_allocations_; }  // block (re)allocations so far
  Device device() const { return device_; }
  // Moves the (empty) arena to `device`: its memory is freed and regrown there on the next step.
  void set_device(Device device);

 private:
  Device device_ = Device::CPU;
  char* block_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;  // bytes handed out (block + overflow), for marks and statistics
  size_t high_water_ = 0;
  size_t heap_allocations_ = 0;
  std::vector<void*> overflow_;
  std::vector<size_t> overflow_at_;  // used_ when each overflow chunk was handed out (freed by release())
  void* raw_alloc(size_t bytes) const;
  void raw_free(void* p) const;
};

}  // namespace megadlm
