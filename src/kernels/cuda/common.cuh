#pragma once
// Shared by the .cu files of the CUDA backend: error checks, bf16 <-> fp32 element access, 16-byte
// vector packs and warp / block reductions. Device code only; nothing here is part of the public API
// (that is kernels/cuda/ops.h).
#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cuda/ops.h"

// Throws megadlm::Error naming the call, the file and line and CUDA's message.
#define MEGADLM_CUDA_CHECK(call)                                                                       \
  do {                                                                                                 \
    cudaError_t err_ = (call);                                                                         \
    if (err_ != cudaSuccess)                                                                           \
      ::megadlm::fail(#call, " failed at ", __FILE__, ":", __LINE__, ": ", cudaGetErrorString(err_));  \
  } while (0)
// After a kernel launch: launch-configuration errors surface here, execution errors at the next sync.
#define MEGADLM_CUDA_LAUNCH_CHECK() MEGADLM_CUDA_CHECK(cudaGetLastError())

namespace megadlm::cuda {

// The public header names bf16 storage as megadlm::bf16_t (host-side type, same 2-byte layout);
// kernels work on __nv_bfloat16. `Dev<T>` maps the public type to the device type.
template <typename T> struct DevType { using type = T; };
template <> struct DevType<bf16_t> { using type = __nv_bfloat16; };
template <typename T> using Dev = typename DevType<T>::type;
template <typename T> inline Dev<T>* dev(T* p) { return reinterpret_cast<Dev<T>*>(p); }
template <typename T> inline const Dev<T>* dev(const T* p) { return reinterpret_cast<const Dev<T>*>(p); }

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
// fp32 -> bf16, round to nearest even, bit for bit core/dtype.h's f32_to_bf16: a NaN keeps its sign and top
// payload bits and is made quiet (| 0x40), where the hardware conversion returns the canonical 0x7fff.
__device__ __forceinline__ __nv_bfloat16 f32_to_bf16(float x) {
  if (isnan(x)) return __ushort_as_bfloat16(static_cast<unsigned short>((__float_as_uint(x) >> 16) | 0x40));
  return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return f32_to_bf16(x); }

// 16 bytes of T: 4 floats or 8 bf16. Memory-bound kernels move data in these when the row length
// and the pointers allow (see `vec_ok`), and fall back to scalars otherwise.
template <typename T>
struct alignas(16) Pack {
  static constexpr int kN = 16 / sizeof(T);
  T v[kN];
};
template <typename T>
__device__ __forceinline__ Pack<T> load_pack(const T* p) { return *reinterpret_cast<const Pack<T>*>(p); }
template <typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T>& x) { *reinterpret_cast<Pack<T>*>(p) = x; }

// kV fp32 values (kV a multiple of 4) from 16-byte aligned p, as float4 loads: per-column parameters
// (norm weights, RoPE tables) read by every row; with one scalar load per value the row kernels are bound
// by L1 instructions rather than by memory (docs/bench/decisions.md).
template <int kV>
__device__ __forceinline__ void load_floats(float* out, const float* p) {
  static_assert(kV % 4 == 0, "load_floats reads float4s");
#pragma unroll
  for (int j = 0; j < kV; j += 4) *reinterpret_cast<float4*>(out + j) = *reinterpret_cast<const float4*>(p + j);
}

// True when every pointer is 16-byte aligned and `row` (elements per row) is a multiple of the pack.
template <typename T>
inline bool vec_ok(int64_t row, std::initializer_list<const void*> ptrs) {
  if (row % Pack<T>::kN != 0) return false;
  for (const void* p : ptrs)
    if (p && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Sum over an aligned group of L lanes (L a power of two, at most 32); every lane of the group gets it.
// All 32 lanes of the warp must make the call.
template <int L>
__device__ __forceinline__ float group_sum(float x) {
#pragma unroll
  for (int o = L / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o, L);
  return x;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` is 32 floats of shared memory; the call synchronises the block twice.
__device__ __forceinline__ float block_sum(float x, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  x = warp_sum(x);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  float t = lane < nwarps ? scratch[lane] : 0.0f;
  return warp_sum(t);
}
__device__ __forceinline__ float block_max(float x, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  x = warp_max(x);
  __syncthreads();
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  float t = lane < nwarps ? scratch[lane] : -INFINITY;
  return warp_max(t);
}

// Stream-ordered scratch of n elements of T from the kept pool (device_alloc_async in ops.h; freed with
// cudaFreeAsync on the same stream).
template <typename T>
T* stream_alloc(int64_t n, cudaStream_t stream) {
  return static_cast<T*>(device_alloc_async(static_cast<size_t>(n) * sizeof(T), stream));
}

inline unsigned grid_for(int64_t n, int threads) {
  const int64_t g = (n + threads - 1) / threads;
  return static_cast<unsigned>(g < 1 ? 1 : (g > 65535LL * 32 ? 65535LL * 32 : g));
}

}  // namespace megadlm::cuda
