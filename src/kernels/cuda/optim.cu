// AdamW over flat fp32 buffers (kernels/cpu/optim.h) and fixed-order reductions for the loss sum and
// the gradient norm. The update moves float4s when all buffers are 16-byte aligned.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace megadlm::cuda {

namespace {

struct AdamWConsts {
  float b1, b2, one_b1, one_b2, eps, step_size, inv_sqrt_bc2, decay, grad_scale;
};

__device__ __forceinline__ float adamw_one(float p, float g, float& m, float& v, const AdamWConsts& k) {
  g *= k.grad_scale;
  m = k.b1 * m + k.one_b1 * g;
  v = k.b2 * v + k.one_b2 * g * g;
  return p * k.decay - k.step_size * m / (sqrtf(v) * k.inv_sqrt_bc2 + k.eps);
}

// zero_grad: each gradient is set to 0 once read (the next step accumulates from there).
__global__ void adamw_kernel(float* param, float* grad, float* m, float* v, __nv_bfloat16* param_bf16, int64_t n,
                             bool vec, bool zero_grad, AdamWConsts k) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  int64_t done = 0;
  if (vec) {
    const int64_t packs = n / 4;
    for (int64_t q = tid; q < packs; q += stride) {
      float4 p = reinterpret_cast<float4*>(param)[q];
      const float4 g = reinterpret_cast<const float4*>(grad)[q];
      if (zero_grad) reinterpret_cast<float4*>(grad)[q] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      float4 mm = reinterpret_cast<float4*>(m)[q];
      float4 vv = reinterpret_cast<float4*>(v)[q];
      p.x = adamw_one(p.x, g.x, mm.x, vv.x, k);
      p.y = adamw_one(p.y, g.y, mm.y, vv.y, k);
      p.z = adamw_one(p.z, g.z, mm.z, vv.z, k);
      p.w = adamw_one(p.w, g.w, mm.w, vv.w, k);
      reinterpret_cast<float4*>(param)[q] = p;
      reinterpret_cast<float4*>(m)[q] = mm;
      reinterpret_cast<float4*>(v)[q] = vv;
      if (param_bf16) {
        __nv_bfloat16* b = param_bf16 + q * 4;
        b[0] = f32_to_bf16(p.x);
        b[1] = f32_to_bf16(p.y);
        b[2] = f32_to_bf16(p.z);
        b[3] = f32_to_bf16(p.w);
      }
    }
    done = packs * 4;
  }
  for (int64_t i = done + tid; i < n; i += stride) {
    float mi = m[i], vi = v[i];
    const float gi = grad[i];
    if (zero_grad) grad[i] = 0.0f;
    const float p = adamw_one(param[i], gi, mi, vi, k);
    m[i] = mi;
    v[i] = vi;
    param[i] = p;
    if (param_bf16) param_bf16[i] = f32_to_bf16(p);
  }
}

enum class Reduce { Sum, SumSquares, AbsMax };
constexpr int kReduceBlocks = 256;
constexpr int kReduceThreads = 256;

template <Reduce R>
__device__ __forceinline__ double reduce_elem(float x) {
  if constexpr (R == Reduce::Sum) return x;
  if constexpr (R == Reduce::SumSquares) return static_cast<double>(x) * x;
  return fabsf(x);
}

// Stage 1: block b reduces the contiguous chunk b of x into partial[b] (fixed thread and tree order).
template <Reduce R>
__global__ void reduce_partial_kernel(double* partial, const float* x, int64_t n) {
  __shared__ double s[kReduceThreads];
  const int64_t chunk = (n + gridDim.x - 1) / gridDim.x;
  const int64_t begin = blockIdx.x * chunk, end = min(n, begin + chunk);
  double acc = 0.0;
  bool nan = false;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double e = reduce_elem<R>(x[i]);
    if constexpr (R == Reduce::AbsMax) {
      nan |= isnan(e);
      acc = fmax(acc, e);
    } else {
      acc += e;
    }
  }
  if constexpr (R == Reduce::AbsMax)
    if (nan) acc = NAN;
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) {
      if constexpr (R == Reduce::AbsMax) {
        const double a = s[threadIdx.x], b = s[threadIdx.x + w];
        s[threadIdx.x] = (isnan(a) || isnan(b)) ? NAN : fmax(a, b);
      } else {
        s[threadIdx.x] += s[threadIdx.x + w];
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

// Stage 2: one thread combines the partials in order.
template <Reduce R, typename Out>
__global__ void reduce_finish_kernel(Out* out, const double* partial, int blocks) {
  double acc = 0.0;
  bool nan = false;
  for (int b = 0; b < blocks; ++b) {
    if constexpr (R == Reduce::AbsMax) {
      nan |= isnan(partial[b]);
      acc = fmax(acc, partial[b]);
    } else {
      acc += partial[b];
    }
  }
  out[0] = static_cast<Out>(nan ? NAN : acc);
}

template <Reduce R, typename Out>
void reduce(Out* out, const float* x, int64_t n, cudaStream_t stream) {
  double* partial = stream_alloc<double>(kReduceBlocks, stream);
  reduce_partial_kernel<R><<<kReduceBlocks, kReduceThreads, 0, stream>>>(partial, x, n);
  MEGADLM_CUDA_LAUNCH_CHECK();
  reduce_finish_kernel<R, Out><<<1, 1, 0, stream>>>(out, partial, kReduceBlocks);
  MEGADLM_CUDA_LAUNCH_CHECK();
  MEGADLM_CUDA_CHECK(cudaFreeAsync(partial, stream));
}

}  // namespace

void adamw_step(float* param, float* grad, float* m, float* v, int64_t n, const AdamWParams& h,
                bf16_t* param_bf16, cudaStream_t stream) {
  MEGADLM_CHECK(n >= 0, "cuda adamw_step: negative length ", n);
  MEGADLM_CHECK(h.step >= 1, "cuda adamw_step: step ", h.step, " must be >= 1 (it is 1-based)");
  MEGADLM_CHECK(h.beta1 >= 0.0f && h.beta1 < 1.0f, "cuda adamw_step: beta1 ", h.beta1, " is outside [0, 1)");
  MEGADLM_CHECK(h.beta2 >= 0.0f && h.beta2 < 1.0f, "cuda adamw_step: beta2 ", h.beta2, " is outside [0, 1)");
  if (n == 0) return;
  // The same constants as the CPU kernel, so both round alike (bias corrections in double).
  const double bc1 = 1.0 - std::pow(static_cast<double>(h.beta1), static_cast<double>(h.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(h.beta2), static_cast<double>(h.step));
  const AdamWConsts k{h.beta1, h.beta2, 1.0f - h.beta1, 1.0f - h.beta2, h.eps, static_cast<float>(h.lr / bc1),
                      static_cast<float>(1.0 / std::sqrt(bc2)), 1.0f - h.lr * h.weight_decay, h.grad_scale};
  const bool vec = vec_ok<float>(4, {param, grad, m, v}) && reinterpret_cast<uintptr_t>(param_bf16) % 8 == 0;
  adamw_kernel<<<grid_for(vec ? n / 4 : n, 256), 256, 0, stream>>>(param, grad, m, v, dev(param_bf16), n, vec,
                                                                    h.zero_grad, k);
  MEGADLM_CUDA_LAUNCH_CHECK();
}

void sum(double* out, const float* x, int64_t n, cudaStream_t stream) { reduce<Reduce::Sum>(out, x, n, stream); }
void sum_squares(double* out, const float* x, int64_t n, cudaStream_t stream) {
  reduce<Reduce::SumSquares>(out, x, n, stream);
}
void abs_max(float* out, const float* x, int64_t n, cudaStream_t stream) { reduce<Reduce::AbsMax>(out, x, n, stream); }

}  // namespace megadlm::cuda
