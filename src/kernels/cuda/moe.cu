// MoE token permutation (nn/moe/moe_router.h's MoERouting layout): gather tokens into expert-grouped rows,
// and combine the expert outputs back per token through a CSR inverse index (deterministic, no atomics).
// One thread per 16-byte pack of a row.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace megadlm::cuda {

namespace {

template <typename T, int kN>
__global__ void permute_kernel(T* rows, const T* x, const int32_t* token, const float* weight, int64_t P, int64_t C) {
  const int64_t packs = C / kN, total = P * packs;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; q < total; q += stride) {
    const int64_t p = q / packs, c = (q % packs) * kN;
    const int64_t t = token[p];
    T v[kN];
    if (t < 0) {
#pragma unroll
      for (int j = 0; j < kN; ++j) v[j] = from_f32<T>(0.0f);
    } else {
      if constexpr (kN > 1) *reinterpret_cast<Pack<T>*>(v) = load_pack(x + t * C + c);
      else v[0] = x[t * C + c];
      if (weight) {
#pragma unroll
        for (int j = 0; j < kN; ++j) v[j] = from_f32<T>(to_f32(v[j]) * weight[p]);
      }
    }
    if constexpr (kN > 1) store_pack(rows + p * C + c, *reinterpret_cast<Pack<T>*>(v));
    else rows[p * C + c] = v[0];
  }
}

template <typename T, int kN>
__global__ void unpermute_kernel(T* out, const T* rows, const int32_t* offsets, const int32_t* list, const float* weight,
                                 int64_t N, int64_t C) {
  const int64_t packs = C / kN, total = N * packs;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; q < total; q += stride) {
    const int64_t n = q / packs, c = (q % packs) * kN;
    float acc[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) acc[j] = 0.0f;
    for (int32_t e = offsets[n]; e < offsets[n + 1]; ++e) {
      const int64_t p = list[e];
      const float w = weight ? weight[p] : 1.0f;
      T v[kN];
      if constexpr (kN > 1) *reinterpret_cast<Pack<T>*>(v) = load_pack(rows + p * C + c);
      else v[0] = rows[p * C + c];
#pragma unroll
      for (int j = 0; j < kN; ++j) acc[j] += w * to_f32(v[j]);
    }
    T o[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) o[j] = from_f32<T>(acc[j]);
    if constexpr (kN > 1) store_pack(out + n * C + c, *reinterpret_cast<Pack<T>*>(o));
    else out[n * C + c] = o[0];
  }
}

// One warp per row p: dot(dout[token[p]], rows[p]).
template <typename T>
__global__ void weight_grad_kernel(float* dweight, const T* dout, const T* rows, const int32_t* token, int64_t P,
                                   int64_t C) {
  const int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (p >= P) return;
  const int64_t t = token[p];
  float s = 0.0f;
  if (t >= 0)
    for (int64_t c = lane; c < C; c += 32) s += to_f32(dout[t * C + c]) * to_f32(rows[p * C + c]);
  s = warp_sum(s);
  if (lane == 0) dweight[p] = s;
}

}  // namespace

template <typename T>
void moe_permute(T* rows, const T* x, const int32_t* token, const float* weight, int64_t P, int64_t C,
                 cudaStream_t stream) {
  if (P <= 0 || C <= 0) return;
  using D = Dev<T>;
  constexpr int kN = Pack<D>::kN;
  if (vec_ok<D>(C, {rows, x}))
    permute_kernel<D, kN><<<grid_for(P * C / kN, 256), 256, 0, stream>>>(dev(rows), dev(x), token, weight, P, C);
  else
    permute_kernel<D, 1><<<grid_for(P * C, 256), 256, 0, stream>>>(dev(rows), dev(x), token, weight, P, C);
  MEGADLM_CUDA_LAUNCH_CHECK();
}

template <typename T>
void moe_unpermute(T* out, const T* rows, const int32_t* token_offsets, const int32_t* token_rows, const float* weight,
                   int64_t N, int64_t C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  using D = Dev<T>;
  constexpr int kN = Pack<D>::kN;
  if (vec_ok<D>(C, {out, rows}))
    unpermute_kernel<D, kN><<<grid_for(N * C / kN, 256), 256, 0, stream>>>(dev(out), dev(rows), token_offsets,
                                                                            token_rows, weight, N, C);
  else
    unpermute_kernel<D, 1><<<grid_for(N * C, 256), 256, 0, stream>>>(dev(out), dev(rows), token_offsets, token_rows,
                                                                      weight, N, C);
  MEGADLM_CUDA_LAUNCH_CHECK();
}

template <typename T>
void moe_unpermute_weight_grad(float* dweight, const T* dout, const T* rows, const int32_t* token, int64_t P, int64_t C,
                               cudaStream_t stream) {
  if (P <= 0) return;
  weight_grad_kernel<<<static_cast<unsigned>((P + 7) / 8), 256, 0, stream>>>(dweight, dev(dout), dev(rows), token, P, C);
  MEGADLM_CUDA_LAUNCH_CHECK();
}

#define MEGADLM_INSTANTIATE(T)                                                                                       \
  template void moe_permute<T>(T*, const T*, const int32_t*, const float*, int64_t, int64_t, cudaStream_t);       \
  template void moe_unpermute<T>(T*, const T*, const int32_t*, const int32_t*, const float*, int64_t, int64_t,    \
                                 cudaStream_t);                                                                   \
  template void moe_unpermute_weight_grad<T>(float*, const T*, const T*, const int32_t*, int64_t, int64_t,        \
                                             cudaStream_t);
MEGADLM_INSTANTIATE(float)
MEGADLM_INSTANTIATE(bf16_t)
#undef MEGADLM_INSTANTIATE

}  // namespace megadlm::cuda
