#include "core/device_memory.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace megadlm {

void* host_alloc_aligned(size_t bytes) {
  constexpr size_t kHugePage = size_t{2} << 20;
  if (bytes < 2 * kHugePage) {
    const size_t n = (bytes + 63) / 64 * 64;
    return std::aligned_alloc(64, n == 0 ? 64 : n);
  }
  const size_t n = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, n);
#ifdef MADV_HUGEPAGE
  if (p) ::madvise(p, n, MADV_HUGEPAGE);  // before the first touch, which is when pages are chosen
#endif
  return p;
}

static void* host_alloc(size_t bytes) {
  void* p = host_alloc_aligned(bytes);
  MEGADLM_CHECK(p != nullptr, "out of memory allocating ", bytes, " bytes of host memory");
  return p;
}
static void host_free(void* p) { std::free(p); }
static void host_zero(void* p, size_t bytes) {
  if (bytes) std::memset(p, 0, bytes);
}
static void host_copy(void* dst, bool, const void* src, bool, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

static const DeviceMemory kHost{Device::CPU, host_alloc, host_free, host_zero, host_copy};
static DeviceMemory g_cuda;  // alloc == nullptr until the CUDA backend registers

void register_device_memory(const DeviceMemory& m) {
  MEGADLM_CHECK(m.device == Device::CUDA && m.alloc && m.free && m.zero && m.copy,
                "register_device_memory: an incomplete table for ", device_name(m.device));
  g_cuda = m;
}

const DeviceMemory& device_memory(Device device) {
  if (device == Device::CPU) return kHost;
  MEGADLM_CHECK(g_cuda.alloc != nullptr, "no memory backend for device ", device_name(device),
                " (a build without -DMEGADLM_CUDA=ON, or the CUDA backend was not initialised by backend_for)");
  return g_cuda;
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  MEGADLM_CHECK(dst_device == Device::CPU || src_device == Device::CPU || dst_device == src_device,
                "copy between two different non-CPU devices");
  const Device d = dst_device != Device::CPU ? dst_device : src_device;
  device_memory(d).copy(dst, dst_device != Device::CPU, src, src_device != Device::CPU, bytes);
}

}  // namespace megadlm
