// LayerNorm and RMSNorm with an optional fused residual add, forward and backward, one block per row.
// Contract: kernels/cuda/ops.h (kernels/cpu/norm.h plus the residual). The row is staged once in shared
// memory as fp32 (two-pass statistics as on the CPU, without re-reading global memory); global loads and
// stores move 16-byte packs when the row length and pointers allow. Weight and bias gradients are column
// sums in a fixed order (colreduce.cuh).
#include "kernels/cuda/colreduce.cuh"
#include "kernels/cuda/ops.h"

namespace megadlm::cuda {

namespace {

constexpr int64_t kMaxC = 12032;  // the fp32 row (+ scratch) in shared memory stays under the 48 KiB default

int threads_for(int64_t C) { return C >= 2048 ? 256 : (C >= 512 ? 128 : 32); }

// x (fp32, shared) = inp + residual for one row; also written to sum_out when set.
template <typename T, bool kVec>
__device__ void stage_row(float* x, const T* inp, const T* residual, T* sum_out, int64_t C) {
  constexpr int kN = kVec ? Pack<T>::kN : 1;
  for (int64_t i = threadIdx.x * kN; i < C; i += blockDim.x * kN) {
    T a[kN], r[kN];
    if constexpr (kVec) *reinterpret_cast<Pack<T>*>(a) = load_pack(inp + i);
    else a[0] = inp[i];
    if (residual) {
      if constexpr (kVec) *reinterpret_cast<Pack<T>*>(r) = load_pack(residual + i);
      else r[0] = residual[i];
#pragma unroll
      for (int j = 0; j < kN; ++j) a[j] = from_f32<T>(to_f32(a[j]) + to_f32(r[j]));  // rounded like the stream
      if (sum_out) {
        if constexpr (kVec) store_pack(sum_out + i, *reinterpret_cast<Pack<T>*>(a));
        else sum_out[i] = a[0];
      }
    }
#pragma unroll
    for (int j = 0; j < kN; ++j) x[i + j] = to_f32(a[j]);
  }
}

template <typename T, bool kVec, bool kRms>
__global__ void norm_forward_kernel(T* out, float* mean_out, float* rstd_out, const T* inp, const T* residual,
                                    T* sum_out, const float* weight, const float* bias, int64_t C, float eps) {
  extern __shared__ float x[];
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  inp += row * C;
  out += row * C;
  if (residual) residual += row * C;
  if (sum_out) sum_out += row * C;
  stage_row<T, kVec>(x, inp, residual, sum_out, C);
  __syncthreads();
  float mean = 0.0f;
  if constexpr (!kRms) {
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) s += x[i];
    mean = block_sum(s, scratch) / static_cast<float>(C);
  }
  float s2 = 0.0f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const float d = x[i] - mean;
    s2 += d * d;
  }
  const float rstd = rsqrtf(block_sum(s2, scratch) / static_cast<float>(C) + eps);
  if (threadIdx.x == 0) {
    if (mean_out) mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
  constexpr int kN = kVec ? Pack<T>::kN : 1;
  for (int64_t i = threadIdx.x * kN; i < C; i += blockDim.x * kN) {
    T o[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      const float y = (x[i + j] - mean) * rstd * weight[i + j] + (bias ? bias[i + j] : 0.0f);
      o[j] = from_f32<T>(y);
    }
    if constexpr (kVec) store_pack(out + i, *reinterpret_cast<Pack<T>*>(o));
    else out[i] = o[0];
  }
}

// dinp = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * weight (RMSNorm: no mean(g) term
// and xhat = x * rstd), plus dresidual.
template <typename T, bool kRms>
__global__ void norm_backward_kernel(T* dinp, const T* dout, const T* inp, const float* weight, const float* mean_in,
                                     const float* rstd_in, const T* dresidual, int64_t C) {
  extern __shared__ float g[];
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  dout += row * C;
  inp += row * C;
  dinp += row * C;
  if (dresidual) dresidual += row * C;
  const float mean = kRms ? 0.0f : mean_in[row];
  const float rstd = rstd_in[row];
  float sg = 0.0f, sgx = 0.0f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const float gi = to_f32(dout[i]) * weight[i];
    g[i] = gi;
    sg += gi;
    sgx += gi * (to_f32(inp[i]) - mean) * rstd;
  }
  const float inv_c = 1.0f / static_cast<float>(C);
  const float mg = kRms ? 0.0f : block_sum(sg, scratch) * inv_c;
  const float mgx = block_sum(sgx, scratch) * inv_c;  // also orders the g[] writes before the reads below
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const float xhat = (to_f32(inp[i]) - mean) * rstd;
    float d = rstd * (g[i] - mg - xhat * mgx);
    if (dresidual) d += to_f32(dresidual[i]);
    dinp[i] = from_f32<T>(d);
  }
}

// dweight[c] += dout[n,c] * xhat[n,c]
template <typename T>
struct WeightGrad {
  const T* dout;
  const T* inp;
  const float* mean;  // null for RMSNorm
  const float* rstd;
  int64_t C;
  __device__ float operator()(int64_t n, int64_t c) const {
    const float m = mean ? mean[n] : 0.0f;
    return to_f32(dout[n * C + c]) * (to_f32(inp[n * C + c]) - m) * rstd[n];
  }
};
template <typename T>
struct ReadCol {
  const T* x;
  int64_t C;
  __device__ float operator()(int64_t n, int64_t c) const { return to_f32(x[n * C + c]); }
};

template <typename T, bool kRms>
void norm_forward(T* out, float* mean, float* rstd, const T* inp, const float* weight, const float* bias, int64_t N,
                  int64_t C, float eps, const T* residual, T* sum_out, cudaStream_t stream) {
  if (N <= 0) return;
  MDLM_CHECK(C > 0 && C <= kMaxC, "cuda norm: C = ", C, " outside the supported 1..", kMaxC);
  using D = Dev<T>;
  const bool vec = vec_ok<D>(C, {out, inp, residual, sum_out});
  const size_t smem = C * sizeof(float);
  const int threads = threads_for(C);
  if (vec)
    norm_forward_kernel<D, true, kRms><<<static_cast<unsigned>(N), threads, smem, stream>>>(
        dev(out), mean, rstd, dev(inp), dev(residual), dev(sum_out), weight, bias, C, eps);
  else
    norm_forward_kernel<D, false, kRms><<<static_cast<unsigned>(N), threads, smem, stream>>>(
        dev(out), mean, rstd, dev(inp), dev(residual), dev(sum_out), weight, bias, C, eps);
  MDLM_CUDA_LAUNCH_CHECK();
}

template <typename T, bool kRms>
void norm_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp, const float* weight,
                   const float* mean, const float* rstd, int64_t N, int64_t C, const T* dresidual, cudaStream_t stream) {
  if (N <= 0) return;
  MDLM_CHECK(C > 0 && C <= kMaxC, "cuda norm backward: C = ", C, " outside the supported 1..", kMaxC);
  using D = Dev<T>;
  // Parameter gradients first: dinp may alias dout.
  column_sum_accumulate(dweight, N, C, WeightGrad<D>{dev(dout), dev(inp), kRms ? nullptr : mean, rstd, C}, stream);
  if (dbias) column_sum_accumulate(dbias, N, C, ReadCol<D>{dev(dout), C}, stream);
  norm_backward_kernel<D, kRms><<<static_cast<unsigned>(N), threads_for(C), C * sizeof(float), stream>>>(
      dev(dinp), dev(dout), dev(inp), weight, mean, rstd, dev(dresidual), C);
  MDLM_CUDA_LAUNCH_CHECK();
}

}  // namespace

template <typename T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const float* weight, const float* bias,
                       int64_t N, int64_t C, float eps, const T* residual, T* sum_out, cudaStream_t stream) {
  norm_forward<T, false>(out, mean, rstd, inp, weight, bias, N, C, eps, residual, sum_out, stream);
}
template <typename T>
void layernorm_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp, const float* weight,
                        const float* mean, const float* rstd, int64_t N, int64_t C, const T* dresidual,
                        cudaStream_t stream) {
  norm_backward<T, false>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, dresidual, stream);
}
template <typename T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const float* weight, int64_t N, int64_t C, float eps,
                     const T* residual, T* sum_out, cudaStream_t stream) {
  norm_forward<T, true>(out, nullptr, rstd, inp, weight, nullptr, N, C, eps, residual, sum_out, stream);
}
template <typename T>
void rmsnorm_backward(T* dinp, float* dweight, const T* dout, const T* inp, const float* weight, const float* rstd,
                      int64_t N, int64_t C, const T* dresidual, cudaStream_t stream) {
  norm_backward<T, true>(dinp, dweight, nullptr, dout, inp, weight, nullptr, rstd, N, C, dresidual, stream);
}

#define MDLM_INSTANTIATE(T)                                                                                      \
  template void layernorm_forward<T>(T*, float*, float*, const T*, const float*, const float*, int64_t, int64_t, \
                                     float, const T*, T*, cudaStream_t);                                         \
  template void layernorm_backward<T>(T*, float*, float*, const T*, const T*, const float*, const float*,        \
                                      const float*, int64_t, int64_t, const T*, cudaStream_t);                   \
  template void rmsnorm_forward<T>(T*, float*, const T*, const float*, int64_t, int64_t, float, const T*, T*,    \
                                   cudaStream_t);                                                                \
  template void rmsnorm_backward<T>(T*, float*, const T*, const T*, const float*, const float*, int64_t, int64_t, \
                                    const T*, cudaStream_t);
MDLM_INSTANTIATE(float)
MDLM_INSTANTIATE(bf16_t)
#undef MDLM_INSTANTIATE

}  // namespace megadlm::cuda
