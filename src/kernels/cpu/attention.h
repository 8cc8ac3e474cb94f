#pragma once
// Scaled dot-product attention, memory-efficient: tiled over queries and keys with an online softmax,
// so it never materialises a [T, T] matrix per head (flash-attention's algorithm on CPU). Scratch is
// per thread and tile-sized; fully masked tiles are skipped. Results are bitwise identical whatever the
// number of OpenMP threads (every output element is computed by one task in a fixed order).
// Legend: B batch, T sequence, H query heads, K key/value heads (H % K == 0; GQA when K < H), D head dim.
#include <cstdint>

#include "kernels/types.h"

namespace megadlm::cpu {

// q [B,T,H,D], k [B,T,K,D], v [B,T,K,D] -> out [B,T,H,D] and lse [B,H,T] (log-sum-exp of the scaled
// scores of each query row, saved for the backward). scale is usually 1/sqrt(D). A query with no
// visible key gets out = 0 and lse = -inf.
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, int64_t B,
                       int64_t T, int64_t H, int64_t K, int64_t D, const AttentionMask& mask, float scale);

// dout [B,T,H,D] -> dq [B,T,H,D], dk [B,T,K,D], dv [B,T,K,D], all written (not accumulated).
// Recomputes the probabilities from lse (flash-attention 2); out and lse are the forward's outputs.
// Under GQA, dk and dv sum over the H/K query heads that share each kv head.
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* out, const float* lse, int64_t B, int64_t T, int64_t H,
                        int64_t K, int64_t D, const AttentionMask& mask, float scale);

// Two attentions of the same queries over disjoint key sets, made one (context parallelism's ring,
// nn/ring_attention.h): acc_out [B,T,H,D], acc_lse [B,H,T] <- the attention over both key sets, from
// themselves and out [B,T,H,D], lse [B,H,T]:
//   lse' = log(exp(acc_lse) + exp(lse)),  out' = exp(acc_lse - lse') acc_out + exp(lse - lse') out.
// A row with lse = -inf (no visible key) leaves acc as it is; one with acc_lse = -inf takes out, lse.
void attention_merge(float* acc_out, float* acc_lse, const float* out, const float* lse, int64_t B, int64_t T,
                     int64_t H, int64_t D);

}  // namespace megadlm::cpu
