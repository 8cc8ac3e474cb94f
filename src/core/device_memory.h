#pragma once
// The memory operations of a device, as a table that the backend owning the device registers
// (kernels/dispatch.cpp registers the CUDA one the first time backend_for(Device::CUDA) is asked for).
// core/ sits below kernels/, so Tensor and Arena allocate, zero and copy device memory through this
// table without depending on any backend. The CPU table is built in (aligned_alloc, memset, memcpy).
#include <cstddef>

#include "core/tensor.h"

namespace megadlm {

struct DeviceMemory {
  Device device = Device::CPU;
  void* (*alloc)(size_t bytes) = nullptr;  // 64-byte aligned at least; throws Error on failure
  void (*free)(void* p) = nullptr;         // null p is fine
  void (*zero)(void* p, size_t bytes) = nullptr;
  // Copies between this device and the host or within this device. `dst_on_device` /
  // `src_on_device` say which side is which (both false is a host memcpy).
  void (*copy)(void* dst, bool dst_on_device, const void* src, bool src_on_device, size_t bytes) = nullptr;
};

// Host memory for tensors, arenas and the CPU table above: 64-byte aligned, freed with std::free; null
// when out of memory (callers name what they were allocating). A block of 4 MiB or more is 2 MiB-aligned
// and advised for transparent huge pages (MADV_HUGEPAGE): where THP is in "madvise" mode (Debian's
// default) the big flat buffers (weights, gradients, moments, activation arenas) then sit in 2 MiB pages,
// which spares the products and passes over them most TLB misses (a training step a little shorter:
// docs/bench/decisions.md). Advice only: where THP is off nothing changes.
void* host_alloc_aligned(size_t bytes);

// Registers the table of a non-CPU device (replaces an earlier one).
void register_device_memory(const DeviceMemory& m);
// The table of `device`; throws Error naming the device when its backend has not registered one (a
// build without CUDA, or backend_for(Device::CUDA) not called yet).
const DeviceMemory& device_memory(Device device);

// Copies `bytes` bytes between any two devices (the host is Device::CPU); at most one side may be a
// non-CPU device. Synchronous with respect to the host.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);

}  // namespace megadlm
