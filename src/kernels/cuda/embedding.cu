// Token (vocab-sharded) and absolute-position embeddings (kernels/cpu/embedding.h).
// Forward: one thread per 4 columns (a float4 of the fp32 tables). Backward: one thread per column
// walks the tokens in order, so repeated tokens add up in a fixed order without atomics.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace megadlm::cuda {

namespace {

template <typename T, int kN>
__global__ void embedding_forward_kernel(T* out, const int32_t* tokens, const float* wte, int64_t vocab_start,
                                         int64_t V, const int32_t* positions, const float* wpe, int64_t N, int64_t C) {
  const int64_t packs = C / kN, total = N * packs;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < total; p += stride) {
    const int64_t n = p / packs, c = (p % packs) * kN;
    const int64_t row = static_cast<int64_t>(tokens[n]) - vocab_start;
    float v[kN];
    if (row >= 0 && row < V) {
      if constexpr (kN == 4) *reinterpret_cast<float4*>(v) = *reinterpret_cast<const float4*>(wte + row * C + c);
      else v[0] = wte[row * C + c];
    } else {
#pragma unroll
      for (int j = 0; j < kN; ++j) v[j] = 0.0f;
    }
    if (wpe) {
      const float* w = wpe + static_cast<int64_t>(positions[n]) * C + c;
#pragma unroll
      for (int j = 0; j < kN; ++j) v[j] += w[j];
    }
#pragma unroll
    for (int j = 0; j < kN; ++j) out[n * C + c + j] = from_f32<T>(v[j]);
  }
}

template <typename T>
__global__ void embedding_backward_kernel(float* dwte, float* dwpe, const T* dout, const int32_t* tokens,
                                          int64_t vocab_start, int64_t V, const int32_t* positions, int64_t N, int64_t C) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  for (int64_t n = 0; n < N; ++n) {
    const float g = to_f32(dout[n * C + c]);
    const int64_t row = static_cast<int64_t>(tokens[n]) - vocab_start;
    if (row >= 0 && row < V) dwte[row * C + c] += g;
    if (dwpe) dwpe[static_cast<int64_t>(positions[n]) * C + c] += g;
  }
}

}  // namespace

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const float* wte, int64_t vocab_start, int64_t V,
                       const int32_t* positions, const float* wpe, int64_t N, int64_t C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  if (C % 4 == 0 && reinterpret_cast<uintptr_t>(wte) % 16 == 0)
    embedding_forward_kernel<Dev<T>, 4><<<grid_for(N * C / 4, 256), 256, 0, stream>>>(dev(out), tokens, wte, vocab_start,
                                                                                       V, positions, wpe, N, C);
  else
    embedding_forward_kernel<Dev<T>, 1><<<grid_for(N * C, 256), 256, 0, stream>>>(dev(out), tokens, wte, vocab_start, V,
                                                                                   positions, wpe, N, C);
  MDLM_CUDA_LAUNCH_CHECK();
}

template <typename T>
void embedding_backward(float* dwte, float* dwpe, const T* dout, const int32_t* tokens, int64_t vocab_start, int64_t V,
                        const int32_t* positions, int64_t N, int64_t C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  embedding_backward_kernel<<<static_cast<unsigned>((C + 127) / 128), 128, 0, stream>>>(
      dwte, dwpe, dev(dout), tokens, vocab_start, V, positions, N, C);
  MDLM_CUDA_LAUNCH_CHECK();
}

#define MDLM_INSTANTIATE(T)                                                                                      \
  template void embedding_forward<T>(T*, const int32_t*, const float*, int64_t, int64_t, const int32_t*,         \
                                     const float*, int64_t, int64_t, cudaStream_t);                              \
  template void embedding_backward<T>(float*, float*, const T*, const int32_t*, int64_t, int64_t, const int32_t*, \
                                      int64_t, int64_t, cudaStream_t);
MDLM_INSTANTIATE(float)
MDLM_INSTANTIATE(bf16_t)
#undef MDLM_INSTANTIATE

}  // namespace megadlm::cuda
