// Conversions between fp32 and bf16 / fp8 (kernels/cpu/cast.h). fp8 uses CUDA's saturating conversion
// (__NV_SATFINITE: out-of-range values clamp to the largest finite value, NaN stays NaN), which is the
// rounding of core/dtype.h's f32_to_e4m3 / f32_to_e5m2. fp16 is IEEE binary16, round to nearest even
// (overflow to inf), as core/dtype.h's f32_to_f16; a NaN may come back with another payload.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace megadlm::cuda {

namespace {

enum class Kind { F32ToBF16, BF16ToF32, F32ToF16, F16ToF32, F32ToE4M3, E4M3ToF32, F32ToE5M2, E5M2ToF32 };

template <Kind K, typename In, typename Out>
__global__ void cast_kernel(Out* out, const In* inp, int64_t n, float scale) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    if constexpr (K == Kind::F32ToBF16) out[i] = f32_to_bf16(inp[i]);
    if constexpr (K == Kind::BF16ToF32) out[i] = __bfloat162float(inp[i]);
    if constexpr (K == Kind::F32ToF16) out[i] = __half_as_ushort(__float2half_rn(inp[i]));
    if constexpr (K == Kind::F16ToF32) out[i] = __half2float(__ushort_as_half(inp[i]));
    if constexpr (K == Kind::F32ToE4M3) out[i] = __nv_cvt_float_to_fp8(inp[i] * scale, __NV_SATFINITE, __NV_E4M3);
    if constexpr (K == Kind::F32ToE5M2) out[i] = __nv_cvt_float_to_fp8(inp[i] * scale, __NV_SATFINITE, __NV_E5M2);
    if constexpr (K == Kind::E4M3ToF32) {
      __nv_fp8_e4m3 q;
      q.__x = inp[i];
      out[i] = static_cast<float>(q) * scale;
    }
    if constexpr (K == Kind::E5M2ToF32) {
      __nv_fp8_e5m2 q;
      q.__x = inp[i];
      out[i] = static_cast<float>(q) * scale;
    }
  }
}

template <Kind K, typename In, typename Out>
void cast(Out* out, const In* inp, int64_t n, float scale, cudaStream_t stream) {
  if (n <= 0) return;
  cast_kernel<K><<<grid_for(n, 256), 256, 0, stream>>>(out, inp, n, scale);
  MEGADLM_CUDA_LAUNCH_CHECK();
}

// x = the value the format holds for x: bf16, fp16, or fp8's dq(q(x * scale)) / scale (a division, as
// kernels/cpu/cast.cpp's round trips).
enum class Trip { BF16, F16, E4M3, E5M2 };

template <Trip K>
__global__ void round_trip_kernel(float* x, int64_t n, float scale) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    const float v = x[i];
    if constexpr (K == Trip::BF16) x[i] = __bfloat162float(f32_to_bf16(v));
    if constexpr (K == Trip::F16) x[i] = __half2float(__float2half_rn(v));
    if constexpr (K == Trip::E4M3) {
      __nv_fp8_e4m3 q;
      q.__x = __nv_cvt_float_to_fp8(v * scale, __NV_SATFINITE, __NV_E4M3);
      x[i] = static_cast<float>(q) / scale;
    }
    if constexpr (K == Trip::E5M2) {
      __nv_fp8_e5m2 q;
      q.__x = __nv_cvt_float_to_fp8(v * scale, __NV_SATFINITE, __NV_E5M2);
      x[i] = static_cast<float>(q) / scale;
    }
  }
}

template <Trip K>
void round_trip(float* x, int64_t n, float scale, cudaStream_t stream) {
  if (n <= 0) return;
  round_trip_kernel<K><<<grid_for(n, 256), 256, 0, stream>>>(x, n, scale);
  MEGADLM_CUDA_LAUNCH_CHECK();
}

}  // namespace

void cast_f32_to_f16(uint16_t* out, const float* inp, int64_t n, cudaStream_t s) {
  cast<Kind::F32ToF16>(reinterpret_cast<unsigned short*>(out), inp, n, 1.0f, s);
}
void cast_f16_to_f32(float* out, const uint16_t* inp, int64_t n, cudaStream_t s) {
  cast<Kind::F16ToF32>(out, reinterpret_cast<const unsigned short*>(inp), n, 1.0f, s);
}
void round_to_bf16(float* x, int64_t n, cudaStream_t s) { round_trip<Trip::BF16>(x, n, 1.0f, s); }
void round_to_f16(float* x, int64_t n, cudaStream_t s) { round_trip<Trip::F16>(x, n, 1.0f, s); }
void quantize_dequantize_e4m3(float* x, int64_t n, float scale, cudaStream_t s) {
  round_trip<Trip::E4M3>(x, n, scale, s);
}
void quantize_dequantize_e5m2(float* x, int64_t n, float scale, cudaStream_t s) {
  round_trip<Trip::E5M2>(x, n, scale, s);
}

void cast_f32_to_bf16(bf16_t* out, const float* inp, int64_t n, cudaStream_t s) {
  cast<Kind::F32ToBF16>(dev(out), inp, n, 1.0f, s);
}
void cast_bf16_to_f32(float* out, const bf16_t* inp, int64_t n, cudaStream_t s) {
  cast<Kind::BF16ToF32>(out, dev(inp), n, 1.0f, s);
}
void cast_f32_to_e4m3(uint8_t* out, const float* inp, int64_t n, float scale, cudaStream_t s) {
  cast<Kind::F32ToE4M3>(reinterpret_cast<__nv_fp8_storage_t*>(out), inp, n, scale, s);
}
void cast_e4m3_to_f32(float* out, const uint8_t* inp, int64_t n, float inv_scale, cudaStream_t s) {
  cast<Kind::E4M3ToF32>(out, reinterpret_cast<const __nv_fp8_storage_t*>(inp), n, inv_scale, s);
}
void cast_f32_to_e5m2(uint8_t* out, const float* inp, int64_t n, float scale, cudaStream_t s) {
  cast<Kind::F32ToE5M2>(reinterpret_cast<__nv_fp8_storage_t*>(out), inp, n, scale, s);
}
void cast_e5m2_to_f32(float* out, const uint8_t* inp, int64_t n, float inv_scale, cudaStream_t s) {
  cast<Kind::E5M2ToF32>(out, reinterpret_cast<const __nv_fp8_storage_t*>(inp), n, inv_scale, s);
}

}  // namespace megadlm::cuda
