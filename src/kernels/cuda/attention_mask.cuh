#pragma once
// The attention masks of kernels/cpu/attention.h on the device, shared by the flash kernel
// (attention.cu) and the cuBLASLt path (attention_gemm.cu).
#include "kernels/cuda/common.cuh"
#include "kernels/types.h"

namespace megadlm::cuda {

struct MaskDev {
  MaskType type;
  int64_t block;
  const int32_t* seg;   // [B, T] device pointer or null
  int64_t half;         // BlockDiffusion: T / 2, the rows of each copy of the sequence
  const int32_t* kseg;  // [B, T] the keys' segment ids when not seg's (context parallelism), or null
};

// One batch row's document ids: the queries' and the keys' (the same row unless kseg is set); null q
// when the mask has none.
struct SegRows {
  const int32_t* q;
  const int32_t* k;
};
__device__ __forceinline__ SegRows segment_rows(const MaskDev& m, int64_t b, int64_t Tn) {
  if (m.seg == nullptr) return SegRows{nullptr, nullptr};
  return SegRows{m.seg + b * Tn, (m.kseg ? m.kseg : m.seg) + b * Tn};
}

// Key j visible to query i (seg: this batch row's segment ids, segment_rows).
__device__ __forceinline__ bool visible(const MaskDev& m, const SegRows& seg, int64_t i, int64_t j) {
  if (m.type == MaskType::Causal && j > i) return false;
  if (m.type == MaskType::BlockCausal && j / m.block > i / m.block) return false;
  if (m.type == MaskType::BlockDiffusion) {
    // Noised query (i < half) of block b: noised block b and clean blocks < b; clean query of block b:
    // clean blocks <= b (kernels/types.h).
    const bool clean_i = i >= m.half, clean_j = j >= m.half;
    const int64_t bi = (clean_i ? i - m.half : i) / m.block, bj = (clean_j ? j - m.half : j) / m.block;
    if (clean_i ? (!clean_j || bj > bi) : (clean_j ? bj >= bi : bj != bi)) return false;
  }
  if (seg.q && seg.q[i] != seg.k[j]) return false;
  return true;
}
// One past the last key any query <= i_max can see (BlockDiffusion: any key, its keys are not a prefix).
__device__ __forceinline__ int64_t key_end(const MaskDev& m, int64_t i_max, int64_t Tn) {
  if (m.type == MaskType::Causal) return i_max + 1;
  if (m.type == MaskType::BlockCausal) return min(Tn, (i_max / m.block + 1) * m.block);
  return Tn;
}
// The first query that can see a key >= j_min (BlockDiffusion: query 0 for the same reason).
__device__ __forceinline__ int64_t query_begin(const MaskDev& m, int64_t j_min) {
  if (m.type == MaskType::Causal) return j_min;
  if (m.type == MaskType::BlockCausal) return j_min / m.block * m.block;
  return 0;
}

// Argument checks shared by both implementations; returns the device form of the mask.
MaskDev attention_check_args(const char* who, int64_t B, int64_t Tn, int64_t H, int64_t K, int64_t D,
                             const AttentionMask& mask);

// The cuBLASLt path (attention_gemm.cu): scores materialised per (batch, head), tensor-core products.
// Scratch: 12 bytes per score (fp32 scores, fp32 dP, T-typed P and dS) for the backward, 6-8 for the forward.
int64_t attention_gemm_scratch_bytes(int64_t B, int64_t Tn, int64_t H, size_t elem);
template <typename T>
void attention_gemm_forward(T* out, float* lse, const T* q, const T* k, const T* v, int64_t B, int64_t Tn, int64_t H,
                            int64_t K, int64_t D, const MaskDev& mask, float scale, cudaStream_t stream);
template <typename T>
void attention_gemm_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                             const float* lse, const float* delta, int64_t B, int64_t Tn, int64_t H, int64_t K,
                             int64_t D, const MaskDev& mask, float scale, cudaStream_t stream);

}  // namespace megadlm::cuda
