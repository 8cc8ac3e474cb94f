// Pointwise kernels (GELU, SiLU, SwiGLU, bias, residual) for fp32 and bf16 activations.
// Contract: kernels/cuda/ops.h, mirroring kernels/cpu/elementwise.h. Each kernel is a grid-stride loop
// over 16-byte packs when every pointer is aligned (scalar tail), over scalars otherwise.
#include "kernels/cuda/colreduce.cuh"
#include "kernels/cuda/ops.h"

namespace megadlm::cuda {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;

__device__ __forceinline__ float gelu_f(float x) {
  const float u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}
__device__ __forceinline__ float gelu_grad(float x) {
  const float u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
  const float t = tanhf(u);
  const float du = kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}
__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + __expf(-x)); }
__device__ __forceinline__ float silu_f(float x) { return x * sigmoid_f(x); }
__device__ __forceinline__ float silu_grad(float x) {
  const float s = sigmoid_f(x);
  return s * (1.0f + x * (1.0f - s));
}

// The element functions, as functors so that one kernel template serves all of them.
struct GeluFwd { __device__ float operator()(float x, float) const { return gelu_f(x); } };
struct GeluBwd { __device__ float operator()(float x, float g) const { return gelu_grad(x) * g; } };
struct SiluFwd { __device__ float operator()(float x, float) const { return silu_f(x); } };
struct SiluBwd { __device__ float operator()(float x, float g) const { return silu_grad(x) * g; } };
struct Add { __device__ float operator()(float a, float b) const { return a + b; } };
struct Scale {
  float s;
  __device__ float operator()(float a, float) const { return a * s; }
};

// out[i] = f(a[i], b[i]) (b may be null: f gets 0). out may alias a or b.
template <typename T, typename F>
__global__ void map2_kernel(T* out, const T* a, const T* b, int64_t n, bool vec, F f) {
  constexpr int kN = Pack<T>::kN;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  int64_t done = 0;
  if (vec) {
    const int64_t packs = n / kN;
    for (int64_t p = tid; p < packs; p += stride) {
      const Pack<T> pa = load_pack(a + p * kN);
      Pack<T> pb;
      if (b) pb = load_pack(b + p * kN);
      Pack<T> po;
#pragma unroll
      for (int j = 0; j < kN; ++j) po.v[j] = from_f32<T>(f(to_f32(pa.v[j]), b ? to_f32(pb.v[j]) : 0.0f));
      store_pack(out + p * kN, po);
    }
    done = packs * kN;
  }
  for (int64_t i = done + tid; i < n; i += stride) out[i] = from_f32<T>(f(to_f32(a[i]), b ? to_f32(b[i]) : 0.0f));
}

template <typename T, typename F>
void map2(T* out, const T* a, const T* b, int64_t n, F f, cudaStream_t stream) {
  if (n <= 0) return;
  using D = Dev<T>;
  const bool vec = vec_ok<D>(Pack<D>::kN, {out, a, b});
  map2_kernel<D, F><<<grid_for(n / (vec ? Pack<D>::kN : 1), 256), 256, 0, stream>>>(dev(out), dev(a), dev(b), n, vec, f);
  MEGADLM_CUDA_LAUNCH_CHECK();
}

// SwiGLU over packs of F columns: one thread per pack of `kN` output columns (scalar when kN == 1).
template <typename T, int kN, bool kBackward>
__global__ void swiglu_kernel(T* dst, const T* gate_up, const T* dout, int64_t N, int64_t F) {
  const int64_t packs_per_row = F / kN;
  const int64_t total = N * packs_per_row;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < total; p += stride) {
    const int64_t row = p / packs_per_row, col = (p % packs_per_row) * kN;
    const T* g = gate_up + row * 2 * F + col;
    const T* u = g + F;
    T gv[kN], uv[kN];
    if constexpr (kN > 1) {
      *reinterpret_cast<Pack<T>*>(gv) = load_pack(g);
      *reinterpret_cast<Pack<T>*>(uv) = load_pack(u);
    } else {
      gv[0] = g[0];
      uv[0] = u[0];
    }
    if constexpr (!kBackward) {
      T o[kN];
#pragma unroll
      for (int j = 0; j < kN; ++j) o[j] = from_f32<T>(silu_f(to_f32(gv[j])) * to_f32(uv[j]));
      if constexpr (kN > 1) store_pack(dst + row * F + col, *reinterpret_cast<Pack<T>*>(o));
      else dst[row * F + col] = o[0];
    } else {
      T dv[kN], dg[kN], du[kN];
      if constexpr (kN > 1) *reinterpret_cast<Pack<T>*>(dv) = load_pack(dout + row * F + col);
      else dv[0] = dout[row * F + col];
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        const float x = to_f32(gv[j]), up = to_f32(uv[j]), d = to_f32(dv[j]);
        dg[j] = from_f32<T>(d * up * silu_grad(x));
        du[j] = from_f32<T>(d * silu_f(x));
      }
      T* o = dst + row * 2 * F + col;
      if constexpr (kN > 1) {
        store_pack(o, *reinterpret_cast<Pack<T>*>(dg));
        store_pack(o + F, *reinterpret_cast<Pack<T>*>(du));
      } else {
        o[0] = dg[0];
        o[F] = du[0];
      }
    }
  }
}

template <typename T, bool kBackward>
void swiglu(T* dst, const T* gate_up, const T* dout, int64_t N, int64_t F, cudaStream_t stream) {
  if (N <= 0 || F <= 0) return;
  using D = Dev<T>;
  constexpr int kN = Pack<D>::kN;
  if (vec_ok<D>(F, {dst, gate_up, dout})) {
    swiglu_kernel<D, kN, kBackward><<<grid_for(N * F / kN, 256), 256, 0, stream>>>(dev(dst), dev(gate_up), dev(dout), N, F);
  } else {
    swiglu_kernel<D, 1, kBackward><<<grid_for(N * F, 256), 256, 0, stream>>>(dev(dst), dev(gate_up), dev(dout), N, F);
  }
  MEGADLM_CUDA_LAUNCH_CHECK();
}

template <typename T>
__global__ void bias_add_kernel(T* out, const float* bias, int64_t N, int64_t C) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < N * C; i += stride)
    out[i] = from_f32<T>(to_f32(out[i]) + bias[i % C]);
}

template <typename T>
struct ReadF32 {
  const T* x;
  int64_t C;
  __device__ float operator()(int64_t n, int64_t c) const { return to_f32(x[n * C + c]); }
};

}  // namespace

template <typename T> void gelu_forward(T* out, const T* inp, int64_t n, cudaStream_t s) {
  map2(out, inp, static_cast<const T*>(nullptr), n, GeluFwd{}, s);
}
template <typename T> void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n, cudaStream_t s) {
  map2(dinp, inp, dout, n, GeluBwd{}, s);
}
template <typename T> void silu_forward(T* out, const T* inp, int64_t n, cudaStream_t s) {
  map2(out, inp, static_cast<const T*>(nullptr), n, SiluFwd{}, s);
}
template <typename T> void silu_backward(T* dinp, const T* inp, const T* dout, int64_t n, cudaStream_t s) {
  map2(dinp, inp, dout, n, SiluBwd{}, s);
}
template <typename T> void swiglu_forward(T* out, const T* gate_up, int64_t N, int64_t F, cudaStream_t s) {
  swiglu<T, false>(out, gate_up, static_cast<const T*>(nullptr), N, F, s);
}
template <typename T>
void swiglu_backward(T* dgate_up, const T* gate_up, const T* dout, int64_t N, int64_t F, cudaStream_t s) {
  swiglu<T, true>(dgate_up, gate_up, dout, N, F, s);
}
template <typename T> void bias_add_forward(T* out, const float* bias, int64_t N, int64_t C, cudaStream_t s) {
  if (N <= 0 || C <= 0) return;
  bias_add_kernel<<<grid_for(N * C, 256), 256, 0, s>>>(dev(out), bias, N, C);
  MEGADLM_CUDA_LAUNCH_CHECK();
}
template <typename T> void bias_backward(float* dbias, const T* dout, int64_t N, int64_t C, cudaStream_t s) {
  column_sum_accumulate(dbias, N, C, ReadF32<Dev<T>>{dev(dout), C}, s);
}
template <typename T> void residual_add(T* out, const T* a, const T* b, int64_t n, cudaStream_t s) {
  map2(out, a, b, n, Add{}, s);
}
template <typename T> void add_inplace(T* a, const T* b, int64_t n, cudaStream_t s) { map2(a, a, b, n, Add{}, s); }
template <typename T> void scale_inplace(T* a, float sc, int64_t n, cudaStream_t s) {
  map2(a, a, static_cast<const T*>(nullptr), n, Scale{sc}, s);
}

#define MEGADLM_INSTANTIATE(T)                                                                              \
  template void gelu_forward<T>(T*, const T*, int64_t, cudaStream_t);                                    \
  template void gelu_backward<T>(T*, const T*, const T*, int64_t, cudaStream_t);                         \
  template void silu_forward<T>(T*, const T*, int64_t, cudaStream_t);                                    \
  template void silu_backward<T>(T*, const T*, const T*, int64_t, cudaStream_t);                         \
  template void swiglu_forward<T>(T*, const T*, int64_t, int64_t, cudaStream_t);                         \
  template void swiglu_backward<T>(T*, const T*, const T*, int64_t, int64_t, cudaStream_t);              \
  template void bias_add_forward<T>(T*, const float*, int64_t, int64_t, cudaStream_t);                   \
  template void bias_backward<T>(float*, const T*, int64_t, int64_t, cudaStream_t);                      \
  template void residual_add<T>(T*, const T*, const T*, int64_t, cudaStream_t);                          \
  template void add_inplace<T>(T*, const T*, int64_t, cudaStream_t);                                     \
  template void scale_inplace<T>(T*, float, int64_t, cudaStream_t);
MEGADLM_INSTANTIATE(float)
MEGADLM_INSTANTIATE(bf16_t)
#undef MEGADLM_INSTANTIATE

}  // namespace megadlm::cuda
