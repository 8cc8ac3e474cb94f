// Device queries and memory helpers of the CUDA backend. Compiled only with -DMEGADLM_CUDA=ON.
#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/ops.h"
#include "kernels/dispatch.h"

namespace megadlm {

// kernels/dispatch.cpp's queries. Never throw (a missing driver is "no GPU").
bool cuda_available_impl() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

int cuda_device_count_impl() {
  int n = 0;
  if (cudaGetDeviceCount(&n) == cudaSuccess) return n;
  (void)cudaGetLastError();  // "no driver" is no GPU
  return 0;
}

int cuda_select_device_impl(int local_rank) {
  const int n = cuda_device_count_impl();
  if (n == 0) return 0;
  const int dev = gpu_for_local_rank(local_rank, n);
  const cudaError_t err = cudaSetDevice(dev);
  if (err != cudaSuccess)
    fail("cudaSetDevice(", dev, ") for node-local rank ", local_rank, " failed: ", cudaGetErrorString(err));
  return dev;
}

}  // namespace megadlm

namespace megadlm::cuda {

namespace {
void check(cudaError_t err, const char* what, size_t bytes = 0) {
  if (err != cudaSuccess) fail(what, bytes ? " of " : "", bytes ? std::to_string(bytes) + " bytes" : "", " failed: ",
                               cudaGetErrorString(err));
}

void retain_pool_memory() {
  // Scratch comes from cudaMallocAsync (attention scores, partial sums). With the default release
  // threshold of 0 the pool hands its memory back to the driver at every synchronisation and the next
  // step maps it again; keep it instead (the high-water mark stays reserved, as PyTorch's caching
  // allocator does).
  static const bool done = [] {
    int dev = 0;
    cudaMemPool_t pool;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetDefaultMemPool(&pool, dev) != cudaSuccess) return false;
    uint64_t threshold = UINT64_MAX;
    return cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold) == cudaSuccess;
  }();
  (void)done;
}
}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error so later calls report their own
    return 0;
  }
  return n;
}

int compute_capability() {
  int dev = 0, major = 0, minor = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev), "cudaDeviceGetAttribute");
  return major * 10 + minor;
}

std::string device_name() {
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
  return prop.name;
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  if (bytes == 0) return nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc", bytes);
  return p;
}

void device_free(void* p) {
  if (p) cudaFree(p);  // no throw: called from destructors
}

void copy_to_device(void* dst, const void* host_src, size_t bytes) {
  if (bytes) check(cudaMemcpy(dst, host_src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy host->device", bytes);
}

void copy_to_host(void* host_dst, const void* src, size_t bytes) {
  if (bytes) check(cudaMemcpy(host_dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy device->host", bytes);
}

void memset_device(void* dst, int value, size_t bytes) {
  if (bytes) check(cudaMemset(dst, value, bytes), "cudaMemset", bytes);
}

void* device_alloc_async(size_t bytes, cudaStream_t stream) {
  retain_pool_memory();
  void* p = nullptr;
  if (bytes) check(cudaMallocAsync(&p, bytes, stream), "cudaMallocAsync", bytes);
  return p;
}

void device_free_async(void* p, cudaStream_t stream) {
  if (p) check(cudaFreeAsync(p, stream), "cudaFreeAsync");
}

void synchronize() { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (a kernel faulted)"); }

}  // namespace megadlm::cuda
