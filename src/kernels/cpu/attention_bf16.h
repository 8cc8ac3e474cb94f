#pragma once
// Memory-efficient attention with bf16 operands, for --bf16 training: the algorithm of attention.h
// (flash-attention 2: tiled, online softmax, P recomputed from lse in the backward, fully masked tiles
// skipped, every mask type and GQA, bitwise identical results whatever the number of OpenMP threads),
// but every tile product takes bf16 operands with fp32 accumulation (AMX tiles where the CPU has them and
// D is a multiple of 32, else AVX512-BF16 vdpbf16ps; kernels/cpu/amx.h). As
// flash-attention does on GPUs, the softmax, its statistics and all accumulators stay fp32, and the
// probabilities P, the score gradients dS and dO are rounded to bf16 only as operands of their products.
// Built for a CPU without AVX512-BF16, both functions convert to fp32 and call attention.h's kernels.
// Each calling thread keeps a workspace for the once-per-call packed copies of the operands (about
// 4 B*T*H*D bf16 for the backward), reused by later calls and freed when the thread ends.
// Legend: B batch, T sequence, H query heads, K key/value heads (H % K == 0; GQA when K < H), D head dim.
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/attention.h"

namespace megadlm::cpu {

// q [B,T,H,D], k [B,T,K,D], v [B,T,K,D] in bf16 -> out [B,T,H,D] and lse [B,H,T] in fp32, as
// attention_forward (lse: natural log-sum-exp of each query's scaled scores; a query with no visible key
// gets out = 0 and lse = -inf). S = scale * Q K^T accumulates in fp32; P is rounded to bf16 for O += P V.
void attention_forward_bf16(float* out, float* lse, const bf16_t* q, const bf16_t* k, const bf16_t* v, int64_t B,
                            int64_t T, int64_t H, int64_t K, int64_t D, const AttentionMask& mask, float scale);

// How the backward walks the (query tile, key tile) pairs. Both schedules give bitwise the same results:
//   - Fused: one task per (b, kv head); each pair's scores and probabilities are made once and feed dQ,
//     dK and dV (five tile products per pair);
//   - TwoPass: a dq pass over (b, head, query tile) tasks, then a dk/dv pass over (b, kv head, key tile)
//     tasks, each remaking the scores (seven products per pair), for more parallelism when B*K is small;
//   - Auto: Fused when there are several (b, kv head) tasks per OpenMP thread, else TwoPass.
enum class AttentionBackwardSchedule { Auto, Fused, TwoPass };

// dout [B,T,H,D] fp32, q/out [B,T,H,D] and k/v [B,T,K,D] bf16, lse [B,H,T] fp32 (the forward's) ->
// dq [B,T,H,D], dk [B,T,K,D], dv [B,T,K,D] in fp32, all written (not accumulated); under GQA dk and dv
// sum over the H/K query heads sharing each kv head. delta_i = dout_i . out_i in fp32; dO, P and dS are
// rounded to bf16 as operands of their products.
void attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const bf16_t* q, const bf16_t* k,
                             const bf16_t* v, const bf16_t* out, const float* lse, int64_t B, int64_t T, int64_t H,
                             int64_t K, int64_t D, const AttentionMask& mask, float scale,
                             AttentionBackwardSchedule schedule = AttentionBackwardSchedule::Auto);

// True when this build runs the bf16 products natively (compiled with AVX512-BF16), false when the
// functions above fall back to the fp32 kernels.
bool attention_bf16_native();

}  // namespace megadlm::cpu
