// Fused softmax cross-entropy over the vocabulary (kernels/cpu/cross_entropy.h), one block per row:
// pass 1 finds the row maximum and the sum of exponentials (each thread an online max/sum over its
// 16-byte packs, then block reductions), pass 2 writes the gradient. The target's logit is read before
// pass 2, so dlogits may alias logits.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace megadlm::cuda {

namespace {

template <typename T, bool kVec>
__global__ void cross_entropy_kernel(float* losses, T* dlogits, const T* logits, const int32_t* targets,
                                     const float* weights, int64_t ignore_index, float grad_scale, int64_t V) {
  __shared__ float scratch[32];
  constexpr int kN = kVec ? Pack<T>::kN : 1;
  const int64_t row = blockIdx.x;
  const T* x = logits + row * V;
  const int64_t t = targets[row];
  const bool ignored = t == ignore_index;
  if (ignored || t < 0 || t >= V) {
    // Ignored rows: loss 0, gradient 0. An out-of-range target (the CPU throws) poisons the loss with NaN.
    if (threadIdx.x == 0 && losses) losses[row] = ignored ? 0.0f : __int_as_float(0x7fc00000);
    if (dlogits)
      for (int64_t i = threadIdx.x; i < V; i += blockDim.x) dlogits[row * V + i] = from_f32<T>(ignored ? 0.0f : NAN);
    return;
  }
  const float x_t = to_f32(x[t]);
  float m = -INFINITY, s = 0.0f;
  for (int64_t i = threadIdx.x * kN; i < V; i += blockDim.x * kN) {
    T v[kN];
    if constexpr (kVec) *reinterpret_cast<Pack<T>*>(v) = load_pack(x + i);
    else v[0] = x[i];
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      const float xv = to_f32(v[j]);
      if (xv > m) {
        s = s * __expf(m - xv) + 1.0f;
        m = xv;
      } else {
        s += __expf(xv - m);
      }
    }
  }
  const float M = block_max(m, scratch);
  const float S = block_sum(m == -INFINITY ? 0.0f : s * __expf(m - M), scratch);
  const float lse = M + logf(S);
  const float w = weights ? weights[row] : 1.0f;
  if (threadIdx.x == 0 && losses) losses[row] = w * (lse - x_t);
  if (!dlogits) return;
  const float gs = grad_scale * w;
  T* d = dlogits + row * V;
  for (int64_t i = threadIdx.x * kN; i < V; i += blockDim.x * kN) {
    T v[kN];
    if constexpr (kVec) *reinterpret_cast<Pack<T>*>(v) = load_pack(x + i);
    else v[0] = x[i];
#pragma unroll
    for (int j = 0; j < kN; ++j) v[j] = from_f32<T>(gs * (__expf(to_f32(v[j]) - lse) - (i + j == t ? 1.0f : 0.0f)));
    if constexpr (kVec) store_pack(d + i, *reinterpret_cast<Pack<T>*>(v));
    else d[i] = v[0];
  }
}

// ---- the vocab-parallel pieces (fp32), one block per row; the tp reductions come between them ----
// Rows of ignore_index give 0 in every piece; an out-of-range target is NaN, as above.

__device__ __forceinline__ bool bad_target(int64_t t, int64_t ignore_index, int64_t V) {
  return t != ignore_index && (t < 0 || t >= V);
}

__global__ void shard_max_kernel(float* row_max, const float* logits, const int32_t* targets, int64_t ignore_index,
                                 int64_t Vl) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  if (targets[row] == ignore_index) {  // uniform over the block
    if (threadIdx.x == 0) row_max[row] = 0.0f;
    return;
  }
  const float* x = logits + row * Vl;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < Vl; i += blockDim.x) m = fmaxf(m, x[i]);
  const float M = block_max(m, scratch);
  if (threadIdx.x == 0) row_max[row] = M;
}

__global__ void shard_sumexp_kernel(double* stats, float* e, const float* logits, const float* row_max,
                                    const int32_t* targets, int64_t ignore_index, int64_t vocab_start, int64_t V,
                                    int64_t Vl) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int64_t t = targets[row];
  float* d = e ? e + row * Vl : nullptr;
  if (t == ignore_index || bad_target(t, ignore_index, V)) {
    const double fill = t == ignore_index ? 0.0 : NAN;
    if (threadIdx.x == 0) stats[2 * row] = stats[2 * row + 1] = fill;
    if (d)
      for (int64_t i = threadIdx.x; i < Vl; i += blockDim.x) d[i] = static_cast<float>(fill);
    return;
  }
  const float* x = logits + row * Vl;
  const int64_t tl = t - vocab_start;
  // The target's logit, read by every thread before any writes e over the logits it may alias.
  const float x_t = tl >= 0 && tl < Vl ? x[tl] : 0.0f;
  __syncthreads();
  const float mx = row_max[row];
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < Vl; i += blockDim.x) {
    const float ev = __expf(x[i] - mx);
    s += ev;
    if (d) d[i] = ev;
  }
  const float S = block_sum(s, scratch);
  if (threadIdx.x == 0) {
    stats[2 * row] = S;
    stats[2 * row + 1] = x_t;
  }
}

__global__ void shard_finish_kernel(float* losses, float* dlogits, const double* stats, const float* row_max,
                                    const int32_t* targets, const float* weights, int64_t ignore_index,
                                    float grad_scale, int64_t vocab_start, int64_t V, int64_t Vl) {
  const int64_t row = blockIdx.x;
  const int64_t t = targets[row];
  float* d = dlogits ? dlogits + row * Vl : nullptr;
  if (t == ignore_index || bad_target(t, ignore_index, V)) {
    const float fill = t == ignore_index ? 0.0f : NAN;
    if (threadIdx.x == 0 && losses) losses[row] = fill;
    if (d)
      for (int64_t i = threadIdx.x; i < Vl; i += blockDim.x) d[i] = fill;
    return;
  }
  const double w = weights ? static_cast<double>(weights[row]) : 1.0;
  const double sum = stats[2 * row];
  if (threadIdx.x == 0 && losses)
    losses[row] = static_cast<float>(w * (static_cast<double>(row_max[row]) + log(sum) - stats[2 * row + 1]));
  if (!d) return;
  const float k = static_cast<float>(static_cast<double>(grad_scale) * w / sum);
  const float c = static_cast<float>(static_cast<double>(grad_scale) * w);
  const int64_t tl = t - vocab_start;
  for (int64_t i = threadIdx.x; i < Vl; i += blockDim.x) d[i] = d[i] * k - (i == tl ? c : 0.0f);
}

int shard_threads(int64_t Vl) { return Vl >= 8192 ? 1024 : (Vl >= 1024 ? 256 : 64); }

}  // namespace

template <typename T>
void cross_entropy_forward_backward(float* losses, T* dlogits, const T* logits, const int32_t* targets,
                                    const float* weights, int64_t ignore_index, float grad_scale, int64_t N, int64_t V,
                                    cudaStream_t stream) {
  if (N <= 0) return;
  MEGADLM_CHECK(V > 0, "cuda cross_entropy: vocabulary size ", V, " must be positive");
  using D = Dev<T>;
  const int threads = V >= 8192 ? 1024 : (V >= 1024 ? 256 : 64);
  if (vec_ok<D>(V, {dlogits, logits}))
    cross_entropy_kernel<D, true><<<static_cast<unsigned>(N), threads, 0, stream>>>(
        losses, dev(dlogits), dev(logits), targets, weights, ignore_index, grad_scale, V);
  else
    cross_entropy_kernel<D, false><<<static_cast<unsigned>(N), threads, 0, stream>>>(
        losses, dev(dlogits), dev(logits), targets, weights, ignore_index, grad_scale, V);
  MEGADLM_CUDA_LAUNCH_CHECK();
}

template void cross_entropy_forward_backward<float>(float*, float*, const float*, const int32_t*, const float*, int64_t,
                                                    float, int64_t, int64_t, cudaStream_t);
template void cross_entropy_forward_backward<bf16_t>(float*, bf16_t*, const bf16_t*, const int32_t*, const float*,
                                                     int64_t, float, int64_t, int64_t, cudaStream_t);

void cross_entropy_shard_max(float* row_max, const float* logits, const int32_t* targets, int64_t ignore_index,
                             int64_t N, int64_t Vl, cudaStream_t stream) {
  if (N <= 0) return;
  shard_max_kernel<<<static_cast<unsigned>(N), shard_threads(Vl), 0, stream>>>(row_max, logits, targets, ignore_index,
                                                                                Vl);
  MEGADLM_CUDA_LAUNCH_CHECK();
}

void cross_entropy_shard_sumexp(double* stats, float* e, const float* logits, const float* row_max,
                                const int32_t* targets, int64_t ignore_index, int64_t vocab_start, int64_t V,
                                int64_t N, int64_t Vl, cudaStream_t stream) {
  if (N <= 0) return;
  shard_sumexp_kernel<<<static_cast<unsigned>(N), shard_threads(Vl), 0, stream>>>(
      stats, e, logits, row_max, targets, ignore_index, vocab_start, V, Vl);
  MEGADLM_CUDA_LAUNCH_CHECK();
}

void cross_entropy_shard_finish(float* losses, float* dlogits, const double* stats, const float* row_max,
                                const int32_t* targets, const float* weights, int64_t ignore_index, float grad_scale,
                                int64_t vocab_start, int64_t V, int64_t N, int64_t Vl, cudaStream_t stream) {
  if (N <= 0) return;
  shard_finish_kernel<<<static_cast<unsigned>(N), shard_threads(Vl), 0, stream>>>(
      losses, dlogits, stats, row_max, targets, weights, ignore_index, grad_scale, vocab_start, V, Vl);
  MEGADLM_CUDA_LAUNCH_CHECK();
}

}  // namespace megadlm::cuda
