// Attention of new query rows against a key/value cache (kernels/cpu/decode_attention.h's contract, with
// offsets a DEVICE array): the inference path of the autoregressive KV cache and the diffusion prefix
// cache. One warp per (sequence, new row, query head): the lanes split the head dimension, each key's
// score is a warp sum, and the softmax runs online over the visible keys in order, so no [S] scores are
// kept. Decoding reads every cached key and value once per query head, which bounds it by memory
// bandwidth; a row's keys are visited in cache order, so the result is deterministic.
// Legend: B batch, Tn new rows per sequence, S cache capacity, H query heads, K kv heads, D head dim.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace megadlm::cuda {

namespace {

constexpr int kMaxPerLane = 8;  // D <= 256

__global__ void decode_attention_kernel(float* out, const float* q, const float* k_cache, const float* v_cache,
                                        const int64_t* offsets, int64_t B, int64_t Tn, int64_t S, int64_t H, int64_t K,
                                        int64_t D, bool causal, float scale) {
  const int64_t w = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (w >= B * Tn * H) return;  // whole warps leave together (blockDim is a multiple of 32)
  const int64_t h = w % H, i = (w / H) % Tn, b = w / (H * Tn);
  const int64_t g = h / (H / K);  // this head's kv group
  const int64_t row = offsets[b] + i;
  const int64_t n = causal ? row + 1 : offsets[b] + Tn;  // visible cache rows [0, n)
  const float* qr = q + ((b * Tn + i) * H + h) * D;
  float qv[kMaxPerLane], acc[kMaxPerLane];
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int64_t d = lane + 32 * j;
    qv[j] = d < D ? qr[d] * scale : 0.0f;
    acc[j] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t s = 0; s < n; ++s) {
    const float* kr = k_cache + ((b * S + s) * K + g) * D;
    const float* vr = v_cache + ((b * S + s) * K + g) * D;
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
      const int64_t d = lane + 32 * j;
      if (d < D) dot += qv[j] * kr[d];
    }
    dot = warp_sum(dot);  // every lane holds the score
    const float m_new = fmaxf(m, dot);
    const float rescale = __expf(m - m_new);  // 0 on the first key (m = -inf)
    const float p = __expf(dot - m_new);
    l = l * rescale + p;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
      const int64_t d = lane + 32 * j;
      if (d < D) acc[j] = acc[j] * rescale + p * vr[d];
    }
    m = m_new;
  }
  float* o = out + ((b * Tn + i) * H + h) * D;
  const float inv = 1.0f / l;
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int64_t d = lane + 32 * j;
    if (d < D) o[d] = acc[j] * inv;
  }
}

}  // namespace

void decode_attention_forward(float* out, const float* q, const float* k_cache, const float* v_cache,
                              const int64_t* offsets, int64_t B, int64_t Tn, int64_t S, int64_t H, int64_t K,
                              int64_t D, bool causal, float scale, cudaStream_t stream) {
  MEGADLM_CHECK(K >= 1 && H % K == 0, "decode attention: kv heads ", K, " do not divide query heads ", H);
  MEGADLM_CHECK(D >= 1 && D <= 32 * kMaxPerLane, "decode attention: head dim ", D, " is above ", 32 * kMaxPerLane);
  const int64_t warps = B * Tn * H;
  if (warps <= 0) return;
  constexpr int kThreads = 128;
  const int64_t blocks = (warps * 32 + kThreads - 1) / kThreads;
  decode_attention_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(out, q, k_cache, v_cache, offsets, B,
                                                                                 Tn, S, H, K, D, causal, scale);
  MEGADLM_CUDA_LAUNCH_CHECK();
}

}  // namespace megadlm::cuda
