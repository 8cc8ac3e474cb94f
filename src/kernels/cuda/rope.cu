// Rotary position embedding, rotate-half convention (kernels/cpu/rope.h). One thread per pack of
// frequencies i..i+kN-1 of one (token, head): it reads x[i..] and x[i+D/2..] and writes both halves.
// The backward is the rotation by -angle (sin negated).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace megadlm::cuda {

namespace {

template <typename T, int kN>
__global__ void rope_kernel(T* out, const T* inp, const int32_t* positions, const float* cos_t, const float* sin_t,
                            int64_t N, int64_t H, int64_t D, float sign) {
  const int64_t half = D / 2, packs = half / kN;
  const int64_t total = N * H * packs;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < total; p += stride) {
    const int64_t nh = p / packs, i = (p % packs) * kN;
    const int64_t n = nh / H;
    const float* c = cos_t + static_cast<int64_t>(positions[n]) * half + i;
    const float* s = sin_t + static_cast<int64_t>(positions[n]) * half + i;
    const T* x = inp + nh * D + i;
    T a[kN], b[kN], oa[kN], ob[kN];
    if constexpr (kN > 1) {
      *reinterpret_cast<Pack<T>*>(a) = load_pack(x);
      *reinterpret_cast<Pack<T>*>(b) = load_pack(x + half);
    } else {
      a[0] = x[0];
      b[0] = x[half];
    }
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      const float xa = to_f32(a[j]), xb = to_f32(b[j]), cj = c[j], sj = sign * s[j];
      oa[j] = from_f32<T>(xa * cj - xb * sj);
      ob[j] = from_f32<T>(xb * cj + xa * sj);
    }
    T* o = out + nh * D + i;
    if constexpr (kN > 1) {
      store_pack(o, *reinterpret_cast<Pack<T>*>(oa));
      store_pack(o + half, *reinterpret_cast<Pack<T>*>(ob));
    } else {
      o[0] = oa[0];
      o[half] = ob[0];
    }
  }
}

template <typename T>
void rope(T* out, const T* inp, const int32_t* positions, const float* cos_t, const float* sin_t, int64_t N, int64_t H,
          int64_t D, float sign, cudaStream_t stream) {
  MEGADLM_CHECK(D > 0 && D % 2 == 0, "cuda rope: head dim D = ", D, " must be even");
  if (N <= 0 || H <= 0) return;
  using Dv = Dev<T>;
  constexpr int kN = Pack<Dv>::kN;
  if (vec_ok<Dv>(D / 2, {out, inp}))
    rope_kernel<Dv, kN><<<grid_for(N * H * (D / 2) / kN, 256), 256, 0, stream>>>(dev(out), dev(inp), positions, cos_t,
                                                                                   sin_t, N, H, D, sign);
  else
    rope_kernel<Dv, 1><<<grid_for(N * H * (D / 2), 256), 256, 0, stream>>>(dev(out), dev(inp), positions, cos_t, sin_t,
                                                                            N, H, D, sign);
  MEGADLM_CUDA_LAUNCH_CHECK();
}

}  // namespace

template <typename T>
void rope_forward(T* out, const T* inp, const int32_t* positions, const float* cos, const float* sin, int64_t N,
                  int64_t H, int64_t D, cudaStream_t stream) {
  rope(out, inp, positions, cos, sin, N, H, D, 1.0f, stream);
}
template <typename T>
void rope_backward(T* dinp, const T* dout, const int32_t* positions, const float* cos, const float* sin, int64_t N,
                   int64_t H, int64_t D, cudaStream_t stream) {
  rope(dinp, dout, positions, cos, sin, N, H, D, -1.0f, stream);
}

template void rope_forward<float>(float*, const float*, const int32_t*, const float*, const float*, int64_t, int64_t,
                                  int64_t, cudaStream_t);
template void rope_backward<float>(float*, const float*, const int32_t*, const float*, const float*, int64_t, int64_t,
                                   int64_t, cudaStream_t);
template void rope_forward<bf16_t>(bf16_t*, const bf16_t*, const int32_t*, const float*, const float*, int64_t,
                                   int64_t, int64_t, cudaStream_t);
template void rope_backward<bf16_t>(bf16_t*, const bf16_t*, const int32_t*, const float*, const float*, int64_t,
                                    int64_t, int64_t, cudaStream_t);

}  // namespace megadlm::cuda
